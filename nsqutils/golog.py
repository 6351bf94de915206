"""Log lines as NSQ's utilities print them to stderr.

* The utility's own messages, through Go's standard ``log`` package: ``2006/01/02 15:04:05 msg``
  (:func:`printf`); :class:`Fatal` is ``log.Fatal``: the message, then exit status 1.
* The client library's, as go-nsq's default logger writes them:
  ``2006/01/02 15:04:05 INF <msg>`` (DBG, INF, WRN, ERR).
"""

import logging
import time

from serving.logs import stderr_logger

_GO_NSQ_LEVELS = {logging.DEBUG: "DBG", logging.INFO: "INF", logging.WARNING: "WRN",
                  logging.ERROR: "ERR", logging.CRITICAL: "ERR"}


class Fatal(Exception):
    """log.Fatal: print the message and exit 1."""


def _stamp(created: float) -> str:
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(created))


class _StdLogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{_stamp(record.created)} {record.getMessage()}"


class _GoNSQFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = _GO_NSQ_LEVELS.get(record.levelno, record.levelname)
        return f"{_stamp(record.created)} {level} {record.getMessage()}"


_std = stderr_logger("nsqutils", _StdLogFormatter(), logging.INFO)


def setup_client_log(level: int = logging.INFO) -> None:
    """The client library's lines in go-nsq's format (go-nsq logs at INFO by default)."""
    stderr_logger("nsqclient", _GoNSQFormatter(), level)


def printf(message: str) -> None:
    """log.Printf (a trailing newline is not doubled)."""
    _std.info(message.rstrip("\n"))
