"""One task reads and executes the commands of every plain connection, from an epoll of its own.

Theory of operation. A connection served by its own reader task pays, for every receive,
trio's bookkeeping of a wait (an ``epoll_ctl`` to arm the socket, a task switch when it is
ready, a reschedule), a read that finds nothing (EAGAIN) before it waits, and a yield after
each read. For a client that sends one PUB and waits for its OK, that is every PUB.

Here a plain connection (no TLS, no compression) parks its reader task and registers its
socket, edge-triggered, in the poller's epoll until the poller hands the task back. The
poller task waits for that epoll's descriptor (itself pollable, so trio waits for it as for a
socket: one wait for all the connections) and then takes every ready connection in one round:
one non-blocking read each, then the commands that read completed, executed synchronously
as the reader task would, in one output batch for the whole round (nsqd/output_batch.py:
each OK goes straight to its socket when the round ends).

Edge-triggered epoll reports a socket once per arrival, never again for what is left
unread, so the poller remembers: a read that filled its buffer may have left more, and that
connection is read again in the next round, which then comes after a plain yield rather than
a wait (one read per connection per round, as each reader task did, so one busy client does
not starve the rest). A shorter read took every byte the socket had, and data that arrives
after it raises a new edge; but not the client's close (or a reset) that came with that data:
its edge was reported with the data's (EPOLLRDHUP, EPOLLHUP, EPOLLERR), so after such an edge
the connection is read again in the next round too, until the read sees the end. A read that
finds nothing (after such an edge, or of a descriptor whose number a new connection has taken
since) is harmless.

Whatever must be awaited goes back to the connection's own task: a command that returns a
coroutine (IDENTIFY's upgrades to TLS or compression, AUTH, any command checked against an
auth server), publishes whose OK is held for an fsync (--sync-every=1), an error (it is sent
after the held OKs), output past the connection's high water mark (it waits for its writer),
the client's close, a failed read, or an unexpected exception (which ends that connection
only, as it did in the task). The poller then drops the socket from its epoll before the task
runs, so it is never read by both (and skips a connection whose task a command has cancelled
meanwhile: it is no longer parked). When the task is done awaiting and has executed
what it had received, it hands itself back and the poller adds the socket again: adding a
socket to an epoll reports it at once if it holds data, so nothing that arrived meanwhile is
missed. A connection that upgrades has no plain descriptor any more and stays with its task.
A task cancelled while parked (the connection is closed) takes its socket out of the epoll.

A parked connection's read deadline (nsqd/heartbeats.py) runs from its last read, as the
reader task's ran from when each read began waiting.
"""

import math
import os
import select

import outcome
import trio

RECEIVE_SIZE = 64 * 1024
ENDED = "ended"  # handed back when the client has closed its side
WATCHED = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET
CLOSING = select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR  # the end is there after the data


class Poller:
    def __init__(self, output_batch):
        self._output_batch = output_batch
        self._epoll = select.epoll()
        self._parked: dict[int, tuple] = {}  # fd -> (connection, its task)
        self._again: list[int] = []  # filled their buffer in the last round: read them again

    def close(self) -> None:
        self._epoll.close()

    async def serve(self, connection):
        """Park ``connection``'s task until the poller hands it back; what it is handed: a
        coroutine to await, None (held OKs or high water to see to) or ENDED. Raises the
        failed read's OSError or the ClientError of a command."""
        fd = connection.fd
        connection.read_since = trio.current_time()
        self._epoll.register(fd, WATCHED)
        self._parked[fd] = (connection, trio.lowlevel.current_task())

        def abort(_):
            self._unpark(fd)
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    def _unpark(self, fd: int) -> None:
        del self._parked[fd]
        self._epoll.unregister(fd)

    def _hand_back(self, fd: int, result: outcome.Outcome) -> None:
        connection, task = self._parked[fd]
        self._unpark(fd)
        connection.read_since = math.inf  # not reading while its task works
        trio.lowlevel.reschedule(task, result)

    async def run(self) -> None:
        epoll, parked, batch = self._epoll, self._parked, self._output_batch
        while True:
            again, self._again = self._again, []
            if again:
                await trio.lowlevel.checkpoint()
            else:
                await trio.lowlevel.wait_readable(epoll.fileno())
            ready = epoll.poll(0, max(1, len(parked)))
            if again:
                fresh = dict(ready)
                ready = [(fd, 0) for fd in again if fd not in fresh] + ready
            now = trio.current_time()
            batch.begin()
            try:
                for fd, events in ready:
                    if fd in parked:
                        self._read(fd, events, parked[fd][0], now)
            finally:
                batch.end()

    def _read(self, fd: int, events: int, connection, now: float) -> None:
        """One read of a ready connection, and its commands executed."""
        try:
            data = os.read(fd, RECEIVE_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            self._hand_back(fd, outcome.Error(exc))
            return
        if not data:
            self._hand_back(fd, outcome.Value(ENDED))
            return
        connection.read_since = now
        try:
            result = connection.execute_polled(data)
        except Exception as exc:  # a defect ends its connection (logged by nsqd), not the poller
            result = outcome.Error(exc)
        if fd not in self._parked:  # the commands closed their own connection
            return
        if result is not None:
            self._hand_back(fd, result)
        elif len(data) == RECEIVE_SIZE or events & CLOSING:
            self._again.append(fd)
