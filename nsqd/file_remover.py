"""Disk queue files removed by a worker thread, not on the event loop.

Unlinking a topic's 1 GB of data files (ten of 100 MiB) makes the kernel free their blocks
and cached pages: tens of milliseconds with every client waiting. A file to remove is
renamed at once (a rename is quick), so its name is free for a queue of the same name
created right after (a topic deleted and published to again), and unlinked later by a
worker thread. A renamed file a crash left behind (``*.removing``) is removed at the next
start; neither NSQ's nsqd nor this one reads such names.
"""

import itertools
import logging
import os

import trio

log = logging.getLogger("nsqd")

SUFFIX = ".removing"


class FileRemover:
    def __init__(self, data_path: str):
        self.data_path = data_path
        self._pending: list[str] = []
        self._wanted = trio.Event()
        self._numbers = itertools.count()

    def remove(self, path: str) -> None:
        """``path`` is gone from its name now and from the disk soon; FileNotFoundError if absent."""
        renamed = f"{path}.{os.getpid()}-{next(self._numbers)}{SUFFIX}"
        os.rename(path, renamed)
        self._pending.append(renamed)
        self._wanted.set()

    async def run(self) -> None:
        """Remove what a crash left, then whatever ``remove`` renames, for as long as nsqd runs."""
        try:
            with os.scandir(self.data_path) as entries:
                self._pending += [entry.path for entry in entries if entry.name.endswith(SUFFIX)]
        except OSError as exc:  # the directory gone or unreadable: disk errors are the queues' to report
            log.error("failed to look for files left to remove in %s - %s", self.data_path, exc)
        while True:
            if not self._pending:
                await self._wanted.wait()
                self._wanted = trio.Event()
            paths, self._pending = self._pending, []
            await trio.to_thread.run_sync(_unlink_all, paths)


def _unlink_all(paths: list[str]) -> None:
    for path in paths:
        try:
            os.remove(path)
        except OSError as exc:
            log.error("failed to remove %s - %s", path, exc)
