"""Every connection's heartbeats and read deadline, kept by one task for all of nsqd.

nsqd sends each client ``_heartbeat_`` every heartbeat interval and drops a client it has
heard nothing from for two intervals (nsqd/protocol_v2.go: the messagePump's heartbeat
ticker, and the read deadline set before each read). Kept by each connection's own writer,
every heartbeat was a wake-up at a deadline, which trio delivers as a cancellation; with
thousands of idle consumers those were most of nsqd's work, and they bunched: 5,000
consumers on 1 s heartbeats gave runs of 1.6 s spent expiring deadlines, long enough for
clients to miss their read deadlines and be dropped.

Here one task keeps each connection's next visit in a heap and wakes once for every visit
due within SLACK of the earliest. What a visit does is the connection's (Connection.visit,
nsqd/connection.py): it writes the heartbeat if it is due (in one output batch,
nsqd/output_batch.py: straight to the sockets that take it, no writer woken) and closes the
connection if it has been silent past its read deadline, which is checked exactly, never
early, and says when to come back. A read deadline moves with every read, so the heap is not
told: a visit finds the deadline as it is then, and comes back at it while it is still ahead.
Entries are dropped lazily, so an entry holds a :class:`Visit`, never the connection itself:
a connection that ends (or is rescheduled) empties its visit, and is freed at once rather
than when the entry falls due, up to two heartbeat intervals later.
"""

import heapq
import itertools
import math

import trio

SLACK = 0.02  # heartbeats due this soon after the earliest go out with it


class Visit:
    """A connection's next visit: the heap's entry refers to it, the connection to nothing else."""

    __slots__ = ("connection",)

    def __init__(self, connection):
        self.connection = connection


class Heartbeats:
    def __init__(self, output_batch):
        self._output_batch = output_batch
        self._heap: list[tuple[float, int, Visit]] = []
        self._order = itertools.count()
        self._visits: dict[object, Visit] = {}  # connection -> its current visit
        self._changed = trio.Event()

    def watch(self, connection) -> None:
        """Heartbeats for ``connection`` from now, at its client's interval (again after IDENTIFY)."""
        self.forget(connection)
        due = connection.start_heartbeats(trio.current_time())
        if due is not None:
            self._schedule(connection, due)

    def forget(self, connection) -> None:
        visit = self._visits.pop(connection, None)
        if visit is not None:
            visit.connection = None

    def _schedule(self, connection, when: float) -> None:
        visit = self._visits[connection] = Visit(connection)
        if not self._heap or when < self._heap[0][0]:
            self._changed.set()
        heapq.heappush(self._heap, (when, next(self._order), visit))

    async def run(self) -> None:
        heap = self._heap
        while True:
            self._changed = trio.Event()
            earliest = heap[0][0] if heap else math.inf
            if earliest > trio.current_time():
                with trio.move_on_at(earliest):
                    await self._changed.wait()
                continue
            now = trio.current_time()
            due = []
            while heap and heap[0][0] <= now + SLACK:
                due.append(heapq.heappop(heap))
            self._output_batch.begin()
            try:
                for _, _, visit in due:
                    connection = visit.connection
                    if connection is not None:
                        self._visit(connection, now)
            finally:
                self._output_batch.end()

    def _visit(self, connection, now: float) -> None:
        again = connection.visit(now, SLACK)
        if again is None:
            self.forget(connection)
        else:
            self._schedule(connection, again)
