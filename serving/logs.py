"""Where the programs' log lines go: standard error, one handler per logger.

The line formats are pure and live elsewhere: NSQ's daemons' (``[nsqd] 2006/01/02 15:04:05.000000
INFO: msg``, common/lg.py) and the utilities' Go log and go-nsq lines (nsqutils/golog.py).
"""

import logging
import sys

from common import lg


def stderr_logger(name: str, formatter: logging.Formatter, level: int) -> logging.Logger:
    """The logger ``name``, writing to stderr alone (not through the root logger) from ``level`` up."""
    logger = logging.getLogger(name)
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return logger


def nsq_logger(name: str, level: str, prefix: str) -> logging.Logger:
    """The logger ``name`` writing NSQ's log lines, ``prefix`` first, from NSQ's ``level`` (``info``) up."""
    return stderr_logger(name, lg.NSQFormatter(prefix), lg.LEVELS[level])
