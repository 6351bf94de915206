"""The Linux fast path: one task reads every plain connection from an edge-triggered epoll.

Theory of operation. A connection served by its own reader task pays, for every receive,
trio's bookkeeping of a wait (an ``epoll_ctl`` to arm the socket, a task switch when it is
ready, a reschedule), a read that finds nothing (EAGAIN) before it waits, and a yield after
each read. For a client that sends one PUB and waits for its OK, that is every PUB.

Here a plain connection (no TLS, no compression) parks its task in ``receive`` and registers
its socket, edge-triggered, in the poller's epoll until the poller hands the task back. The
poller task waits for that epoll's descriptor (itself pollable, so trio waits for it as for a
socket: one wait for all the connections) and then takes every ready connection in one round:
one non-blocking read each, handed to the connection (``Connection.received_in_round``,
which executes the commands that read completed, as the connection's task would), all in one
output batch for the whole round (nsqd/output_batch.py: a read's OKs go straight to its socket
with ``send_now``, one ``os.write``, once that read's commands are done; what the round's
reads gave other connections, when the round ends).

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
auth server, a command that creates its topic), publishes whose OK is held for an fsync
(--sync-every=1), an error (it is sent after the held OKs), output past the connection's high
water mark (it waits for its writer), the client's close, a failed read, or an unexpected
exception (which ends that connection only, as it did in the task). The poller then drops the
socket from its epoll before the task runs, so it is never read by both (and skips a
connection whose task a command has cancelled meanwhile: it is no longer parked). When the
task is done awaiting and has executed what it had received, it calls ``receive`` again and
the poller adds the socket again: adding a socket to an epoll reports it at once if it holds
data, so nothing that arrived meanwhile is missed. A connection that upgrades moves to the
portable backend (nsqd/stream_backend.py) and never comes back. A task cancelled while parked
(the connection is closed) takes its socket out of the epoll.

This module needs ``select.epoll`` when it is imported: nsqd imports it only where that exists.
"""

import functools
import os
import select

import outcome
import trio

from .io_backend import ENDED, RECEIVE_SIZE
from .stream_backend import StreamBackend

WATCHED = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET
CLOSING = select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR  # the end is there after the data


class EpollBackend(StreamBackend):
    """A plain socket: read by the poller, written with ``os.write`` when it takes the bytes
    at once; sends that must wait, closing and upgrading are the portable backend's."""

    direct = True

    def __init__(self, stream: trio.SocketStream, poller: "Poller"):
        super().__init__(stream)
        self.fd = stream.socket.fileno()
        # bound to what does the work: no frame of ours between the connection and the write, or the park
        self.send_now = functools.partial(os.write, self.fd)
        self.receive = functools.partial(poller.serve, self.fd)


class Poller:
    def __init__(self, output_batch):
        self._output_batch = output_batch
        self._epoll = select.epoll()
        self._parked: dict[int, tuple] = {}  # fd -> (connection, its task)
        self._again: list[int] = []  # filled their buffer in the last round: read them again

    def close(self) -> None:
        self._epoll.close()

    def backend_for(self, stream: trio.SocketStream) -> EpollBackend:
        return EpollBackend(stream, self)

    async def serve(self, fd: int, connection):
        """Park ``connection``'s task until the poller hands it back (EpollBackend.receive)."""
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
        task = self._parked[fd][1]
        self._unpark(fd)
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
        """One read of a ready connection, handed to it."""
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
        try:
            result = connection.received_in_round(data, now)
        except Exception as exc:  # a defect ends its connection (logged by nsqd), not the poller
            result = outcome.Error(exc)
        if result is None:
            if len(data) == RECEIVE_SIZE or events & CLOSING:
                self._again.append(fd)  # the next round skips it if its commands closed it meanwhile
        elif fd in self._parked:  # unless the commands closed their own connection
            self._hand_back(fd, result)
