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
  later one replaces it only after ``forget``). ``forget(key)`` cancels it. ``wake_all_at(keys,
  deadline)`` is ``wake_at`` for each, in order.
* A key is handed over once the clock has reached its deadline, never earlier than
  ``slack`` before it: the task wakes at the earliest deadline (a ``wake_at`` sooner than that
  wakes it to sleep again until the new one; a later one costs at most a heap push), and takes every
  key due by then plus ``slack`` in one round. With ``slack`` 0 nothing goes early.
* A round's keys go to the owner's ``due(keys, now)`` in one call, in deadline order (ties in
  the order asked), with the clock read once for all of them, so the owner can batch what
  they do (heartbeats: one output batch, nsqd/output_batch.py). A key handed over has no
  wake-up left: the owner asks again, in the call or later, for the next.
* A round hands over at most ``most`` keys (no limit by default), so no round holds the event
  loop for long however many keys come due at once; the rest (due by then plus ``slack``)
  come in the next round, after a checkpoint. Trio runs every ready task once per scheduling
  batch, in an order of its own choosing, so each other ready task runs between a full round
  and the one after the next: no task waits behind more than two rounds.

Every clock read is trio's (``trio.current_time``, the one nsqd's I/O seam gives every timing
rule: nsqd/io_backend.py), so trio.testing.MockClock drives the scheduler in the tests.

The heap holds each distinct deadline once, a float; beside it, the keys due at each deadline,
in the order asked. Keys handed over in one round and asked again for the same time (every
connection of a round of heartbeats at the same interval: ``now + interval``) share one deadline,
so they cost the heap one push and, when due, one pop: a heap entry per key made every heartbeat
sift a heap as deep as there are connections, through memory an idle nsqd has not touched since
the last round. Asked again all at once (``wake_all_at``: heartbeats.py groups a round's
connections by when they come back), they cost no Python step each either: their cells are made
in one comprehension and entered with one ``dict.update``, where ``wake_at`` for each was ~37
bytecodes and a call per heartbeat.

Keys are dropped lazily: a key's wake-up is a cell, ``[key, deadline]``; a sooner deadline or
``forget`` empties the key's current cell, so a stale one is skipped when its deadline comes up,
and a forgotten key (a closed connection, a deleted channel) is freed at once rather than when
its deadline would have come, up to two heartbeat intervals later. A wake-up is made of
builtins only: no Python code runs to make one, as one is made for every heartbeat.
"""

import heapq
import math
from collections.abc import Callable

import trio


class WakeScheduler:
    def __init__(self, due: Callable[[list, float], None], slack: float = 0.0, most: float = math.inf):
        self._due = due
        self._slack = slack
        self._most = most  # keys a round hands over at most
        self._deadlines: list[float] = []  # a heap, each deadline once
        self._cells: dict[float, list[list]] = {}  # deadline -> the cells due then, in the order asked
        self._wakes: dict[object, list] = {}  # key -> its current cell, [key, deadline]
        self._sleeper = None  # the task while it sleeps: woken when the earliest deadline moves earlier

    def wake_at(self, key, deadline: float) -> None:
        """Wake ``key`` at ``deadline``, unless it has a sooner wake-up already."""
        wakes = self._wakes
        cell = wakes.get(key)
        if cell is not None:
            if cell[1] <= deadline:
                return
            cell[0] = None
        cell = wakes[key] = [key, deadline]
        self._add_cells([cell], deadline)

    def wake_all_at(self, keys: list, deadline: float) -> None:
        """``wake_at(key, deadline)`` for each of ``keys`` (distinct): a round of heartbeats
        coming back together at now + their interval, with no Python step per key but making
        its cell when none of them has a wake-up (the usual case: the round just took them)
        and there are several (one, a connection coming back at its own read deadline, is
        cheaper asked alone)."""
        wakes = self._wakes
        if len(keys) == 1 or not wakes.keys().isdisjoint(keys):
            for key in keys:
                self.wake_at(key, deadline)
            return
        cells = [[key, deadline] for key in keys]
        wakes.update(zip(keys, cells))
        self._add_cells(cells, deadline)

    def _add_cells(self, cells: list, deadline: float) -> None:
        due_then = self._cells.get(deadline)
        if due_then is not None:
            due_then += cells
            return
        self._cells[deadline] = cells
        deadlines = self._deadlines
        if (not deadlines or deadline < deadlines[0]) and self._sleeper is not None:
            trio.lowlevel.reschedule(self._sleeper)
            self._sleeper = None
        heapq.heappush(deadlines, deadline)

    def forget(self, key) -> None:
        """Never wake ``key`` for what it asked so far."""
        cell = self._wakes.pop(key, None)
        if cell is not None:
            cell[0] = None

    async def run(self) -> None:
        deadlines = self._deadlines
        while True:
            earliest = deadlines[0] if deadlines else math.inf
            if earliest > trio.current_time():
                await self._sleep_until(earliest)
                continue
            while self._hand_over_due():  # a full round: the rest after a checkpoint
                await trio.lowlevel.checkpoint()

    async def _sleep_until(self, deadline: float) -> None:
        """Until ``deadline``, or until a sooner deadline is asked for (``_add_cells`` hands the
        task back). Reaching the deadline raises no Cancelled: its cancel scope's abort hands the
        task back instead (a Cancelled raised through these frames, with its traceback, made
        every round of heartbeats dearer); a cancellation from outside (nsqd stopping) is raised
        as usual."""
        task = trio.lowlevel.current_task()
        with trio.move_on_at(deadline) as scope:
            def abort(_):
                self._sleeper = None
                if scope.cancel_called:  # this scope's deadline, not a cancellation from outside
                    trio.lowlevel.reschedule(task)
                    return trio.lowlevel.Abort.FAILED
                return trio.lowlevel.Abort.SUCCEEDED

            self._sleeper = task
            await trio.lowlevel.wait_task_rescheduled(abort)

    def _hand_over_due(self) -> bool:
        """One round (its keys held no longer than the call: one forgotten meanwhile is freed);
        True if it was full (more may be due)."""
        now = trio.current_time()
        keys = self._take_due(now + self._slack)
        if keys:
            self._due(keys, now)
        return len(keys) >= self._most

    def _take_due(self, by: float) -> list:
        """The live keys due by ``by``, in deadline order, at most ``most``, with their wake-ups gone."""
        deadlines, cells, wakes, keys, most = self._deadlines, self._cells, self._wakes, [], self._most
        while deadlines and deadlines[0] <= by:
            due_then = cells[deadlines[0]]
            for index, (key, _) in enumerate(due_then):
                if key is not None:
                    if len(keys) >= most:
                        cells[deadlines[0]] = due_then[index:]  # due still, in the next round
                        return keys
                    del wakes[key]
                    keys.append(key)
            del cells[heapq.heappop(deadlines)]
        return keys
