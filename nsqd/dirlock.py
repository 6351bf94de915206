"""An exclusive lock on the data directory (NSQ's internal/dirlock: flock on the directory).

Where there is no fcntl (Windows) the lock does nothing, as NSQ's dirlock_windows.go does.
"""

import os

try:
    import fcntl
except ImportError:
    fcntl = None


class DirLockError(Exception):
    """Another process (this nsqd or NSQ's) holds the data directory."""


class DirLock:
    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        if fcntl is None:
            return
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirLockError(f"--data-path={self.path} in use (possibly by another instance of nsqd)") from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
