"""NSQ's log line format and levels (internal/lg): ``[nsqd] 2006/01/02 15:04:05.000000 INFO: msg``.

Formatting only: serving/logs.py sends the lines to stderr.
"""

import logging
import time

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "error": logging.ERROR, "fatal": logging.CRITICAL}


def parse_level(text: str) -> str:
    """lg.ParseLogLevel: a level named in any case, as a key of LEVELS; ValueError in NSQ's words."""
    if text.lower() not in LEVELS:
        raise ValueError(f"invalid log level '{text}' (debug, info, warn, error, fatal)")
    return text.lower()


_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARNING",
          logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}


class NSQFormatter(logging.Formatter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        line = f"{self.prefix}{stamp}.{micros:06d} {_NAMES.get(record.levelno, record.levelname)}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line

