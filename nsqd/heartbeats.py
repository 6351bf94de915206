"""Every connection's heartbeats and read deadline, kept by one task for all of nsqd.

nsqd sends each client ``_heartbeat_`` every heartbeat interval and drops a client it has
heard nothing from for two intervals (nsqd/protocol_v2.go: the messagePump's heartbeat
ticker, and the read deadline set before each read). Kept by each connection's own writer,
every heartbeat was a wake-up at a deadline, which trio delivers as a cancellation; with
thousands of idle consumers those were most of nsqd's work, and they bunched: 5,000
consumers on 1 s heartbeats gave runs of 1.6 s spent expiring deadlines, long enough for
clients to miss their read deadlines and be dropped.

Here one task (nsqd/wake_scheduler.py) keeps each connection's next visit and wakes once for
every visit due within SLACK of the earliest, at most ROUND_MOST of them a round (the rest come
in the next round, once every other task has run): a heartbeat is ~20 µs of nsqd's CPU, mostly
its write, so a round of thousands would hold the event loop for tens of milliseconds. Heartbeats
go on a grid (nsqd/heartbeat_grid.py), so the connections of one interval share at most 64
rounds an interval. What a visit does is the connection's
(Connection.visit, nsqd/connection.py): it writes the heartbeat if it is due (an idle
connection's straight to its socket, one constant frame; one with output waiting, after it, in
the round's output batch, nsqd/output_batch.py; no writer woken unless the socket is full) and
closes the connection if it has been silent past its read deadline, which is checked exactly,
never early, and says when to come back: the round asks the scheduler again for all those
coming back at one time at once (most of a round: now + the interval). A read deadline moves
with every read, so the scheduler is not told: a visit finds the deadline as it is then, and
comes back at it while it is still ahead. A connection that ends is forgotten, and freed at once.
"""

import trio

from .wake_scheduler import WakeScheduler

SLACK = 0.02  # heartbeats due this soon after the earliest go out with it
ROUND_MOST = 100  # connections visited in one round at most: ~2 ms of the event loop


class Heartbeats:
    def __init__(self, output_batch):
        self._output_batch = output_batch
        self._scheduler = WakeScheduler(self._visit, SLACK, ROUND_MOST)
        self.run = self._scheduler.run
        self.forget = self._scheduler.forget

    def watch(self, connection) -> None:
        """Heartbeats for ``connection`` from now, at its client's interval (again after IDENTIFY)."""
        self.forget(connection)
        due = connection.start_heartbeats(trio.current_time())
        if due is not None:
            self._scheduler.wake_at(connection, due)

    def _visit(self, connections: list, now: float) -> None:
        """One round: each connection due sends its heartbeat or ends, in one output batch; those
        that go on are woken again in groups by when (mostly one: now + the interval)."""
        again_at: dict[float, list] = {}
        batch = self._output_batch
        batch.begin()
        try:
            for connection in connections:
                again = connection.visit(now, SLACK)
                if again is not None:
                    again_at.setdefault(again, []).append(connection)
        finally:
            for again, group in again_at.items():
                self._scheduler.wake_all_at(group, again)
            batch.end()
