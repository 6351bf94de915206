"""nsqd's TCP side (nsqd/tcp.go): each accepted connection, on the I/O backend it gets.

Every connection is a :class:`nsqd.connection.Connection` (the protocol side) over an I/O
backend (nsqd/io_backend.py). ``--io-backend=auto`` (the default) gives plain sockets the Linux
fast path, one edge-triggered epoll read by nsqd's poller task (nsqd/epoll_backend.py), where
``select.epoll`` exists; elsewhere, and with ``--io-backend=portable``, every connection is
read by its own task through trio's streams (nsqd/stream_backend.py). The start-up log says
which.
"""

import logging
import select

import trio

from serving.listeners import remote_address

from .connection import Connection
from .io_backend import AUTO
from .stream_backend import StreamBackend

log = logging.getLogger("nsqd")


class TCPServer:
    def __init__(self, nsqd, io_backend: str):
        self.nsqd = nsqd
        self.connections: set[Connection] = set()
        self._poller = None
        if io_backend == AUTO and hasattr(select, "epoll"):
            from .epoll_backend import Poller  # needs select.epoll: Linux only

            self._poller = Poller(nsqd.output_batch)

    def describe(self) -> str:
        """Which backend serves plain connections, for the log."""
        if self._poller is not None:
            return "epoll (edge-triggered epoll and direct writes; TLS and compression on trio streams)"
        reason = "" if hasattr(select, "epoll") else ": no select.epoll on this platform"
        return f"portable (trio streams{reason})"

    def start(self, nursery: trio.Nursery) -> None:
        """The fast path's poller task, for as long as nsqd runs (none without the fast path).
        Started as it is: a coroutine of ours around it would be one more frame in every round."""
        if self._poller is not None:
            nursery.start_soon(self._poller.run)

    def close(self) -> None:
        if self._poller is not None:
            self._poller.close()

    def backend_for(self, stream: trio.abc.Stream):
        if self._poller is not None and isinstance(stream, trio.SocketStream):
            return self._poller.backend_for(stream)
        return StreamBackend(stream)

    async def serve(self, stream: trio.abc.Stream, client_id: int) -> None:
        """One connection, from its accept to its end."""
        await self.nsqd.turns.take()  # clients connecting together start a few a round
        remote = remote_address(stream)
        conn = Connection(self.nsqd, self.backend_for(stream), client_id, remote)
        self.connections.add(conn)
        log.info("TCP: new client(%s)", remote)
        try:
            await conn.run()
        except Exception:
            log.exception("client %s: unexpected error, connection closed", remote)
        finally:
            self.connections.discard(conn)
