"""One task that wakes each of many owners at its own deadline: nsqd's heartbeats and deferred messages.

Theory of operation. nsqd has two kinds of thing that must act at a time of their own: every
connection, for its heartbeat and read deadline (nsqd/heartbeats.py: the messagePump's heartbeat
ticker and the read deadline of NSQ's nsqd/protocol_v2.go), and every channel with deferred
messages (nsqd/deferred_timer.py: NSQ's queueScanLoop, nsqd/nsqd.go). A task, cancel scope and
event for each would cost every connection and channel ~3 KiB and a wake-up of its own, idle or
not; here one :class:`WakeScheduler` per kind keeps them all, and its one task sleeps until the
earliest deadline.

Its timing rules (tests/test_nsqd_wake_scheduler.py checks each under trio's MockClock):

* ``wake_at(key, deadline)`` asks for ``key`` (a connection, a channel) to be woken at
  ``deadline``. A key has at most one wake-up: asked again, it keeps the sooner of the two (a
  later one replaces it only after ``forget``). ``forget(key)`` cancels it.
* A key is handed over once the clock has reached its deadline, never earlier than
  ``slack`` before it: the task wakes at the earliest deadline (a ``wake_at`` sooner than that
  wakes it to sleep again until the new one; a later one costs a heap push), and takes every
  key due by then plus ``slack`` in one round. With ``slack`` 0 nothing goes early.
* A round's keys go to the owner's ``due(keys, now)`` in one call, in deadline order (ties in
  the order asked), with the clock read once for all of them, so the owner can batch what
  they do (heartbeats: one output batch, nsqd/output_batch.py). A key handed over has no
  wake-up left: the owner asks again, in the call or later, for the next.

Every clock read is trio's (``trio.current_time``, the one nsqd's I/O seam gives every timing
rule: nsqd/io_backend.py), so trio.testing.MockClock drives the scheduler in the tests.

Entries are dropped lazily: a heap entry is ``(deadline, order, cell)``, the cell a one-item list
holding the key, never the key itself; a sooner deadline or ``forget`` empties the key's current
cell, so a stale entry is skipped when it comes up, and a forgotten key (a closed connection, a
deleted channel) is freed at once rather than when its entry would have fallen due, up to two
heartbeat intervals later. A wake-up is made of builtins only (a tuple, a list, an int): no
Python code runs to make one, as one is made for every heartbeat.
"""

import heapq
import itertools
import math
from collections.abc import Callable

import trio


class WakeScheduler:
    def __init__(self, due: Callable[[list, float], None], slack: float = 0.0):
        self._due = due
        self._slack = slack
        self._heap: list[tuple[float, int, list]] = []
        self._order = itertools.count()
        self._wakes: dict[object, tuple[float, int, list]] = {}  # key -> its current entry
        self._sooner = trio.Event()  # set when the earliest deadline moves earlier

    def wake_at(self, key, deadline: float) -> None:
        """Wake ``key`` at ``deadline``, unless it has a sooner wake-up already."""
        wakes = self._wakes
        entry = wakes.get(key)
        if entry is not None:
            if entry[0] <= deadline:
                return
            entry[2][0] = None
        entry = wakes[key] = (deadline, next(self._order), [key])
        heap = self._heap
        if not heap or deadline < heap[0][0]:
            self._sooner.set()
        heapq.heappush(heap, entry)

    def forget(self, key) -> None:
        """Never wake ``key`` for what it asked so far."""
        entry = self._wakes.pop(key, None)
        if entry is not None:
            entry[2][0] = None

    async def run(self) -> None:
        heap = self._heap
        while True:
            self._sooner = trio.Event()
            earliest = heap[0][0] if heap else math.inf
            if earliest > trio.current_time():
                with trio.move_on_at(earliest):
                    await self._sooner.wait()
                continue
            now = trio.current_time()
            keys = self._take_due(now + self._slack)
            if keys:
                self._due(keys, now)

    def _take_due(self, by: float) -> list:
        """Every live key due by ``by``, in deadline order, with its wake-up gone."""
        heap, wakes, keys = self._heap, self._wakes, []
        while heap and heap[0][0] <= by:
            key = heapq.heappop(heap)[2][0]
            if key is not None:
                del wakes[key]
                keys.append(key)
        return keys
