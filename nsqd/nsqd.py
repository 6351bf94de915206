"""The daemon: its topics, its listeners and the tasks they share (nsqd/nsqd.go)."""

import itertools
import logging
import socket
import time

import trio

from .guid import GuidFactory
from .options import parse_address
from .tcp import Connection
from .topic import Topic

log = logging.getLogger("nsqd")


async def open_listeners(address: str, what: str) -> list[trio.SocketListener]:
    """TCP listeners for ``host:port``, or one unix-socket listener for a path."""
    parsed = parse_address(address, what)
    if isinstance(parsed, str):
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.bind(parsed)
        sock.listen(socket.SOMAXCONN)
        return [trio.SocketListener(sock)]
    host, port = parsed
    return await trio.open_tcp_listeners(port, host=host or None)


def bound_port(listeners: list[trio.SocketListener]) -> int:
    """The port actually listened on (-1 for a unix socket, as nsqd reports it)."""
    name = listeners[0].socket.getsockname()
    return name[1] if isinstance(name, tuple) else -1


class NSQD:
    def __init__(self, opts):
        self.opts = opts
        self.guid = GuidFactory(opts.node_id)
        self.topics: dict[str, Topic] = {}
        self.connections: set[Connection] = set()
        self.start_time = int(time.time())
        self.tcp_port = 0
        self._client_ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        self._channel_scopes: dict[object, trio.CancelScope] = {}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            listeners = await open_listeners(self.opts.tcp_address, "--tcp-address")
            self.tcp_port = bound_port(listeners)
            log.info("TCP: listening on %s", _format_address(listeners[0].socket.getsockname()))
            await nursery.start(trio.serve_listeners, self._serve_connection, listeners)
            task_status.started(self)

    async def _serve_connection(self, stream) -> None:
        remote = _remote_address(stream)
        conn = Connection(self, stream, next(self._client_ids), remote)
        self.connections.add(conn)
        log.info("TCP: new client(%s)", remote)
        try:
            await conn.run()
        except Exception:
            log.exception("client %s: unexpected error, connection closed", remote)
        finally:
            self.connections.discard(conn)

    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = Topic(name, self)
            self.topics[name] = topic
            log.info("TOPIC(%s): created", name)
        return topic

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        for channel_name in list(topic.channels):
            topic.delete_channel(channel_name)
        log.info("TOPIC(%s): deleted", name)
        return True

    def start_channel(self, channel) -> None:
        scope = trio.CancelScope()
        self._channel_scopes[channel] = scope
        self._nursery.start_soon(self._run_channel, channel, scope)
        log.info("TOPIC(%s): new channel(%s)", channel.topic.name, channel.name)

    async def _run_channel(self, channel, scope: trio.CancelScope) -> None:
        with scope:
            await channel.run_deferred()

    def stop_channel(self, channel) -> None:
        """The channel was deleted: stop its task and disconnect its consumers."""
        channel.deleted = True
        scope = self._channel_scopes.pop(channel, None)
        if scope is not None:
            scope.cancel()
        for conn in list(self.connections):
            if conn.client.channel is channel:
                conn.close()
        log.info("CHANNEL(%s:%s): deleted", channel.topic.name, channel.name)


def _format_address(name) -> str:
    """Go's ``host:port`` form of a socket address (``[::1]:4150``), or the unix path."""
    if isinstance(name, tuple):
        host = f"[{name[0]}]" if ":" in name[0] else name[0]
        return f"{host}:{name[1]}"
    return name or "unix"


def _remote_address(stream) -> str:
    try:
        return _format_address(stream.socket.getpeername())
    except (AttributeError, OSError):
        return "unknown"

