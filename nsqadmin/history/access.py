"""The stats history as nsqadmin's pages and JSON API read it, or why there is none.

With the history off (availability.py) ``off`` says why and nothing is read; otherwise each
read is a blocking call of reader.History, run in a worker thread so the event loop never
waits on Parquet files. The reader is imported only when the history is on: it needs pyarrow.
"""

import asyncio
import logging
from typing import Callable, TypeVar

T = TypeVar("T")


class HistoryUnavailable(Exception):
    """No history to read; the text says why, as a sentence for the pages."""


class HistoryOff(HistoryUnavailable):
    pass


class HistoryUnreadable(HistoryUnavailable):
    """The files cannot be read; the reason is in nsqadmin's log."""


class HistoryAccess:
    def __init__(self, stats_dir: str, off: str | None, log: logging.Logger):
        self.stats_dir = stats_dir
        self.off = off
        self.log = log
        self._history = None
        self._unreadable: tuple[type[Exception], ...] = (OSError,)
        if off is None:
            import pyarrow as pa  # the history extra, present when the history is on

            from .reader import History
            self._history = History(stats_dir)
            self._unreadable = (OSError, pa.ArrowException)

    async def read(self, read: Callable[..., T]) -> T:
        """``read(history)`` (a reader.History) in a worker thread; HistoryOff or HistoryUnreadable."""
        if self._history is None:
            raise HistoryOff(f"The stats history is off: {self.off}.")
        try:
            return await asyncio.to_thread(read, self._history)
        except self._unreadable as exc:
            self.log.error("cannot read the stats history in %s - %s", self.stats_dir, exc)
            raise HistoryUnreadable("The stats history cannot be read: see nsqadmin's log.") from exc
