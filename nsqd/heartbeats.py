"""Every connection's heartbeats and read deadline, kept by one task for all of nsqd.

nsqd sends each client ``_heartbeat_`` every heartbeat interval and drops a client it has
heard nothing from for two intervals (nsqd/protocol_v2.go: the messagePump's heartbeat
ticker, and the read deadline set before each read). Kept by each connection's own writer,
every heartbeat was a wake-up at a deadline, which trio delivers as a cancellation; with
thousands of idle consumers those were most of nsqd's work, and they bunched: 5,000
consumers on 1 s heartbeats gave runs of 1.6 s spent expiring deadlines, long enough for
clients to miss their read deadlines and be dropped.

Here one task keeps each connection's next visit in a heap and wakes once for every visit
due within SLACK of the earliest. A visit writes the heartbeat if it is due (in one output
batch, nsqd/output_batch.py: straight to the sockets that take it, no writer woken) and
closes the connection if it has been silent past its read deadline, which is checked
exactly, never early. A read deadline moves with every read, so the heap is not told: a
visit finds the deadline as it is then, and comes back at it while it is still ahead.
Entries are dropped lazily, so an entry holds a :class:`Visit`, never the connection itself:
a connection that ends (or is rescheduled) empties its visit, and is freed at once rather
than when the entry falls due, up to two heartbeat intervals later.
"""

import heapq
import itertools
import logging
import math

import trio

log = logging.getLogger("nsqd")

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
        self._changed = trio.Event()

    def watch(self, connection) -> None:
        """Heartbeats for ``connection`` from now, at its client's interval (again after IDENTIFY)."""
        self.forget(connection)
        interval = connection.client.heartbeat_interval
        if interval > 0:
            connection.heartbeat_due = trio.current_time() + interval
            self._schedule(connection, connection.heartbeat_due)

    def forget(self, connection) -> None:
        if connection.visit is not None:
            connection.visit.connection = None
            connection.visit = None

    def _schedule(self, connection, when: float) -> None:
        connection.visit = Visit(connection)
        if not self._heap or when < self._heap[0][0]:
            self._changed.set()
        heapq.heappush(self._heap, (when, next(self._order), connection.visit))

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
                    if visit.connection is not None:
                        self._visit(visit.connection, now)
            finally:
                self._output_batch.end()

    def _visit(self, connection, now: float) -> None:
        client = connection.client
        interval = client.heartbeat_interval
        read_deadline = connection.read_since + 2 * interval
        if now >= read_deadline:
            log.info("client %s: no data for %ss, closing", client.remote_address, 2 * interval)
            self.forget(connection)
            connection.end()
            return
        if now + SLACK >= connection.heartbeat_due:
            client.send_heartbeat()
            connection.heartbeat_due = now + interval
        self._schedule(connection, min(connection.heartbeat_due, read_deadline))
