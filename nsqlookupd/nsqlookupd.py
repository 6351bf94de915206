"""The daemon: its registration DB, its TCP and HTTP listeners (nsqlookupd/nsqlookupd.go).

``run`` listens on TCP (peers) and HTTP (the API, a Starlette app served by
serving.http through serving.asgi) and serves until ``stop()``; stopping closes the
listeners and every peer connection.
"""

import logging
import socket
import time

import trio

from serving.asgi import ASGIAdapter
from serving.http import HTTPServer
from serving.listeners import bound_port, format_address, open_listeners, remote_address

from .http_api import build_app
from .registration_db import RegistrationDB
from .tcp import PeerConnection

log = logging.getLogger("nsqlookupd")

# nsqlookupd's routes read no body; one this large is not read (the connection is then closed).
MAX_HTTP_BODY_SIZE = 1024 * 1024


class NSQLookupd:
    def __init__(self, opts, clock=time.time_ns):
        self.opts = opts
        self.db = RegistrationDB(clock)
        self.hostname = socket.gethostname()
        self.tcp_port = 0
        self.http_port = 0
        self.connections: set[PeerConnection] = set()
        self._stopped = trio.Event()

    @property
    def inactive_producer_timeout_ns(self) -> int:
        return round(self.opts.inactive_producer_timeout * 1e9)

    @property
    def tombstone_lifetime_ns(self) -> int:
        return round(self.opts.tombstone_lifetime * 1e9)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``stop()``."""
        async with trio.open_nursery() as nursery:
            tcp_listeners = await open_listeners(self.opts.tcp_address, "--tcp-address")
            self.tcp_port = bound_port(tcp_listeners)
            tcp_name = format_address(tcp_listeners[0].socket.getsockname())
            log.info("TCP: listening on %s", tcp_name)
            http_listeners = await open_listeners(self.opts.http_address, "--http-address")
            self.http_port = bound_port(http_listeners)
            http_name = format_address(http_listeners[0].socket.getsockname())
            log.info("HTTP: listening on %s", http_name)

            await nursery.start(trio.serve_listeners, self._serve_connection, tcp_listeners)
            adapter = ASGIAdapter(build_app(self), server=_server(http_listeners))
            await adapter.startup(nursery)
            server = HTTPServer(adapter, max_body_size=MAX_HTTP_BODY_SIZE)
            await nursery.start(server.serve, http_listeners)
            task_status.started(self)

            await self._stopped.wait()
            log.info("TCP: closing %s", tcp_name)
            log.info("HTTP: closing %s", http_name)
            await adapter.shutdown()
            nursery.cancel_scope.cancel()
        log.info("NSQ: bye")

    def stop(self) -> None:
        self._stopped.set()

    async def _serve_connection(self, stream) -> None:
        conn = PeerConnection(self, stream, remote_address(stream))
        self.connections.add(conn)
        try:
            await conn.run()
        except Exception:
            log.exception("CLIENT(%s): unexpected error, connection closed", conn)
        finally:
            self.connections.discard(conn)


def _server(listeners) -> tuple[str, int] | None:
    name = listeners[0].socket.getsockname()
    return (name[0], name[1]) if isinstance(name, tuple) else None
