"""The memory part of a queue: a FIFO of messages that Python's cyclic collector does not walk
one by one.

A full collection visits every item of every container it tracks. A deque of 2,000,000
queued messages is one container of 2,000,000 items, and each visit reads the message's type
to learn it is not a container itself (bytes never are): one cache miss a message, 113-137 ms
of a full collection measured (a loop no client got an answer from meanwhile; NSQ's Go
collector runs beside its goroutines).

Here messages are kept in blocks of about BLOCK. New ones are appended to the open block (a
list); once it holds BLOCK, it is sealed into a tuple and a new open block starts. A tuple of
bytes can never be part of a reference cycle, and CPython's collector would untrack it itself
the first time it looked at it (gcmodule.c's untrack_tuples, in the youngest collection after
the tuple was made), but that look reads every message again: 42 ms for a young collection
that met 500 such tuples at once, which a burst of MPUBs gives it. So a sealed block is
untracked at once, through the C API's PyObject_GC_UnTrack (0.2 us a block, by ctypes; on a
Python without it the collector's own untracking is left to happen). A full collection then
visits one sealed block, not its thousand messages: 0.5 ms for 2,000,000 messages in the
same measurement. The block messages are taken from (the head) is a list with a read
index, so a take is one slice, never a loop over messages: a sealed block becomes a list
again (one copy of its references) when it becomes the head. The head and the open block are
the same list while the queue holds no sealed block between them. The messages taken from the
head stay referenced by it until it is used up: at most a block's worth a queue, freed a little
later than a deque would have freed them.
"""

import sys
from collections import deque
from itertools import chain, islice

from .slices import RELEASE_STEP, Steps

BLOCK = 1000


def _untracker():
    """CPython's PyObject_GC_UnTrack, or None on another Python."""
    if sys.implementation.name != "cpython":
        return None
    import ctypes

    untrack = ctypes.pythonapi.PyObject_GC_UnTrack
    untrack.argtypes = (ctypes.py_object,)
    untrack.restype = None
    return untrack


_untrack = _untracker()


def untracked(container):
    """``container``, out of the collector's walk from now on (where CPython's C API allows it): for
    a container of messages (bytes, or tuples of numbers and bytes), which can never be part of a
    reference cycle. A list stays untracked as it grows (CPython tracks a list once, when it is made)."""
    if _untrack is not None:
        _untrack(container)
    return container


class ChunkedQueue:
    __slots__ = ("_head", "_at", "_sealed", "_open", "_length")

    def __init__(self, messages):
        self._open: list = list(messages)  # new messages are appended to it
        self._head: list = self._open  # messages are taken from it, from ``_at`` on
        self._at = 0
        self._sealed: deque[tuple] = deque()  # the full blocks between head and open block, oldest first
        self._length = len(self._open)

    def __len__(self) -> int:
        return self._length

    def __iter__(self):
        """Oldest first (a snapshot's references must be taken before the queue changes)."""
        rest = self._open if self._open is not self._head else ()
        return chain(islice(self._head, self._at, None), *self._sealed, rest)

    def first(self):
        """The oldest message (the queue is not empty)."""
        if self._at == len(self._head):
            self._next_head()
        return self._head[self._at]

    def extend(self, messages) -> None:
        """Append ``messages`` (a list or tuple) after the newest."""
        block = self._open
        block += messages
        self._length += len(messages)
        if len(block) >= BLOCK:
            self._seal()

    def _seal(self) -> None:
        """The open block is full: it is sealed (unless it is being taken from) and a new one opens."""
        if self._open is not self._head:
            block = tuple(self._open)  # of bytes only: nothing the collector needs to look into
            if _untrack is not None:
                _untrack(block)
            self._sealed.append(block)
        self._open = []

    def take(self, count: int) -> list:
        """The oldest ``count`` messages (all of them if fewer), removed."""
        head, at = self._head, self._at
        end = at + count
        if end < len(head):
            self._at = end
            self._length -= count
            return head[at:end]
        return self._take_across(count)

    def _take_across(self, count: int) -> list:
        """``take`` past the end of the head block: the rest of it, then whole blocks and a part."""
        taken = self._head[self._at:]
        self._at = len(self._head)
        while len(taken) < count and len(taken) < self._length:
            self._next_head()
            wanted = count - len(taken)
            taken += self._head[:wanted]
            self._at = min(wanted, len(self._head))
        self._length -= len(taken)
        return taken

    def _next_head(self) -> None:
        """The head block is taken: the oldest sealed block, or else the open one, is the head now."""
        self._head = list(self._sealed.popleft()) if self._sealed else self._open
        self._at = 0

    def released_steps(self) -> Steps[None]:
        """Empty the queue RELEASE_STEP messages a step (nsqd runs the steps paced, nsqd/slices.py):
        freeing 1,000,000 messages at once held the loop for their deallocation. A step cuts what
        it took off the head block, so that its messages are freed then: ``take`` leaves them in
        the block, and they went a whole block (BLOCK) at a time, when the next block came."""
        while self._length:
            self.take(RELEASE_STEP)
            del self._head[:self._at]
            self._at = 0
            yield

    def clear(self) -> None:
        self._open = self._head = []
        self._at = 0
        self._sealed = deque()
        self._length = 0
