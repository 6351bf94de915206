"""Listening addresses as NSQ's daemons take them: ``host:port`` or a unix socket path."""

import socket
import ssl

import trio

from common.goflags import FlagError


def parse_address(address: str, what: str) -> tuple[str, int] | str:
    """``host:port`` as (host, port), or a unix socket path as it is; FlagError if neither."""
    if address.startswith("/") or ":" not in address:
        if not address:
            raise FlagError(f"{what} must not be empty")
        return address
    host, _, port_text = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port_text.isdigit() or int(port_text) > 65535:
        raise FlagError(f"{what}: invalid port in {address!r}")
    return host, int(port_text)


def listen_error(address: str, what: str, exc: OSError) -> OSError:
    """NSQ's ``listen (<address>) failed - <why>``, naming the flag."""
    why = exc.strerror.lower() if exc.strerror else str(exc)
    return OSError(f"{what}: listen ({address}) failed - {why}")


async def open_listeners(address: str, what: str) -> list[trio.SocketListener]:
    """TCP listeners for ``host:port``, or one unix-socket listener for a path."""
    parsed = parse_address(address, what)
    try:
        if isinstance(parsed, str):
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            await sock.bind(parsed)
            sock.listen(socket.SOMAXCONN)
            return [trio.SocketListener(sock)]
        host, port = parsed
        return await trio.open_tcp_listeners(port, host=host or None)
    except OSError as exc:
        raise listen_error(address, what, exc) from exc


def tls_listeners(listeners: list[trio.SocketListener], context: ssl.SSLContext) -> list[trio.SSLListener]:
    """The same listeners, each connection behind TLS (the handshake runs on first use)."""
    return [trio.SSLListener(listener, context, https_compatible=True) for listener in listeners]


def bound_port(listeners: list[trio.SocketListener]) -> int:
    """The port actually listened on (-1 for a unix socket, as NSQ reports it)."""
    name = listeners[0].socket.getsockname()
    return name[1] if isinstance(name, tuple) else -1


def format_address(name) -> str:
    """Go's ``host:port`` form of a socket address (``[::1]:4160``), or the unix path."""
    if isinstance(name, tuple):
        host = f"[{name[0]}]" if ":" in name[0] else name[0]
        return f"{host}:{name[1]}"
    return name or "unix"


def socket_of(stream):
    """The socket under a trio stream, through any TLS layer."""
    while not hasattr(stream, "socket") and hasattr(stream, "transport_stream"):
        stream = stream.transport_stream
    return stream.socket


def remote_address(stream) -> str:
    """The peer of a trio socket stream, in Go's form."""
    try:
        return format_address(socket_of(stream).getpeername())
    except (AttributeError, OSError):
        return "unknown"
