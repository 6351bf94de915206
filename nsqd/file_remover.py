"""Disk queue files removed by worker threads, not on the event loop.

Unlinking a topic's 1 GB of data files (ten of 100 MiB) makes the kernel free their blocks
and cached pages: tens of milliseconds with every client waiting. A file to remove is
renamed first (a rename is quick), so its name is free for a queue of the same name, and
unlinked later by a worker thread. A renamed file a crash left behind (``*.removing``) is
removed at the next start; neither NSQ's nsqd nor this one reads such names.

A file a disk queue has read to its end is renamed at once, on the loop (``remove``). A
deleted topic's or channel's files are moved away together by a worker thread (``move_away``),
so deleting a topic makes no call to the filesystem on the loop: its eleven renames and a removal
there (a 1 GB topic) were the one step of the deletion every client waited for, and such a call
can wait for the filesystem. Until the thread has made them, the queue's name is taken
(``busy``): nsqd makes no queue of that name, which would read the old metadata and files,
before ``settled``. NSQ's nsqd instead keeps a deleted topic in its map, failing publishes to
it, until its files are gone (nsqd.go DeleteExistingTopic). Moves run one batch at a time, in
order: once a name's latest move is done, so are the ones before it (a channel's files, moved
before its topic's). A queue's data files go first and its metadata last, as go-diskqueue
removes them: a crash among them leaves renamed files, removed at the next start, and a queue
whose first files are gone, which the next start reads as such if nsqd.dat still names it.
"""

import itertools
import logging
import os
from contextlib import AbstractContextManager, nullcontext

import trio

log = logging.getLogger("nsqd")

SUFFIX = ".removing"

Move = tuple[str, trio.Event, list[str], AbstractContextManager]  # name, done, paths, the lock held


class FileRemover:
    def __init__(self, data_path: str):
        self.data_path = data_path
        self._pending: list[str] = []  # renamed, to unlink
        self._wanted = trio.Event()
        self._numbers = itertools.count()
        self._moves: list[Move] = []
        self._move_wanted = trio.Event()
        self._moving: dict[str, trio.Event] = {}  # each busy name's latest move, set when it is done

    def remove(self, path: str) -> None:
        """``path`` is gone from its name now and from the disk soon; FileNotFoundError if absent."""
        self._unlink_later([self._rename_away(path)])

    def _rename_away(self, path: str) -> str:
        """Rename ``path`` to a name nothing reads (safe in any thread); the new name."""
        renamed = f"{path}.{os.getpid()}-{next(self._numbers)}{SUFFIX}"
        os.rename(path, renamed)
        return renamed

    def _unlink_later(self, renamed: list[str]) -> None:
        self._pending += renamed
        self._wanted.set()

    def move_away(self, name: str, paths: list[str], lock: AbstractContextManager = nullcontext()) -> None:
        """Rename ``paths`` (those absent passed over) in a worker thread soon, in order, holding
        ``lock``, and unlink them later; ``name`` is busy until they are renamed."""
        done = trio.Event()
        self._moving[name] = done
        self._moves.append((name, done, paths, lock))
        self._move_wanted.set()

    def busy(self, name: str) -> bool:
        """Whether files of the queue ``name`` are still to be moved out of its way."""
        return name in self._moving

    async def settled(self, name: str) -> None:
        """Return once no file of the queue ``name`` is left to move away."""
        while (done := self._moving.get(name)) is not None:
            await done.wait()

    async def run(self) -> None:
        """Remove what a crash left, then whatever is moved away or renamed, for as long as nsqd runs."""
        try:
            with os.scandir(self.data_path) as entries:
                self._pending += [entry.path for entry in entries if entry.name.endswith(SUFFIX)]
        except OSError as exc:  # the directory gone or unreadable: disk errors are the queues' to report
            log.error("failed to look for files left to remove in %s - %s", self.data_path, exc)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._move_loop)
            await self._unlink_loop()

    async def _unlink_loop(self) -> None:
        while True:
            if not self._pending:
                await self._wanted.wait()
                self._wanted = trio.Event()
            paths, self._pending = self._pending, []
            await trio.to_thread.run_sync(_unlink_all, paths)

    async def _move_loop(self) -> None:
        while True:
            await self._move_wanted.wait()
            self._move_wanted = trio.Event()
            await self.move_outstanding()

    async def move_outstanding(self) -> None:
        """Make the moves asked for so far (the loop's, and the graceful stop's last ones)."""
        moves, self._moves = self._moves, []
        if not moves:
            return
        renamed = await trio.to_thread.run_sync(self._rename_all, moves)
        self._unlink_later(renamed)
        for name, done, _, _ in moves:
            if self._moving.get(name) is done:
                del self._moving[name]
            done.set()

    def _rename_all(self, moves: list[Move]) -> list[str]:
        renamed: list[str] = []
        for _, _, paths, lock in moves:
            with lock:
                renamed += self._rename_existing(paths)
        return renamed

    def _rename_existing(self, paths: list[str]) -> list[str]:
        renamed = []
        for path in paths:
            try:
                renamed.append(self._rename_away(path))
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.error("failed to move %s out of the way - %s", path, exc)
        return renamed


def _unlink_all(paths: list[str]) -> None:
    for path in paths:
        try:
            os.remove(path)
        except OSError as exc:
            log.error("failed to remove %s - %s", path, exc)
