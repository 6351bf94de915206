"""A small HTTP/1.1 server on trio and h11 for the daemons' APIs.

Measured on this machine, hypercorn's trio worker serves ~1,200 requests/s and a thin
trio + h11 loop ~5,000 (shared/reference/stack.md); nsqd's ``POST /pub`` needs the
latter. Handlers get a whole :class:`Request` (body read, bounded by ``max_body_size``)
and return a :class:`Response`; keep-alive is the default, as in Go's net/http.
"""

import logging
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Awaitable, Callable
from urllib.parse import urlsplit

import h11
import trio

log = logging.getLogger("http")

RECEIVE_SIZE = 64 * 1024
IDLE_TIMEOUT = 120.0
DISCONNECTED = (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError)


@dataclass
class Request:
    method: str
    path: str
    query: str  # raw query string: each API parses it with its own rules
    headers: dict[str, str]
    body: bytes
    remote_address: str
    body_too_big: bool = False  # the body went past the server's limit and was not read


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response]]


class HTTPServer:
    def __init__(self, handler: Handler, max_body_size: int, name: str = "HTTP"):
        self.handler = handler
        self.max_body_size = max_body_size
        self.name = name

    async def serve(self, listeners, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await trio.serve_listeners(self._serve_connection, listeners, task_status=task_status)

    async def _serve_connection(self, stream) -> None:
        remote = _peer(stream)
        try:
            await self._handle_requests(stream, remote)
        except DISCONNECTED:
            pass
        except h11.ProtocolError as exc:
            log.debug("%s: bad request from %s: %s", self.name, remote, exc)
        except Exception:
            log.exception("%s: unexpected error serving %s", self.name, remote)
        finally:
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await stream.aclose()

    async def _handle_requests(self, stream, remote: str) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            request = await self._read_request(stream, conn, remote)
            if request is None:
                return
            response = await self.handler(request)
            keep_alive = not request.body_too_big and conn.our_state is h11.SEND_RESPONSE
            await self._send_response(stream, conn, response, keep_alive, request.method == "HEAD")
            if not keep_alive or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _next_event(self, stream, conn):
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            with trio.fail_after(IDLE_TIMEOUT):
                data = await stream.receive_some(RECEIVE_SIZE)
            conn.receive_data(data)

    async def _read_request(self, stream, conn, remote: str) -> Request | None:
        try:
            event = await self._next_event(stream, conn)
        except h11.RemoteProtocolError as exc:
            await self._send_bad_request(stream, conn, exc)
            return None
        if not isinstance(event, h11.Request):
            return None
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in event.headers}
        target = urlsplit(event.target.decode("latin-1"))
        request = Request(event.method.decode("ascii"), target.path, target.query, headers, b"", remote)
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_size:
            request.body_too_big = True
            return request
        if conn.they_are_waiting_for_100_continue:
            # as Go's server does once a handler reads the body; curl waits 1 s for it otherwise
            await stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[],
                                                                      reason=b"Continue")))
        chunks, size = [], 0
        while True:
            event = await self._next_event(stream, conn)
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.max_body_size:
                    request.body_too_big = True
                    return request
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                request.body = b"".join(chunks)
                return request
            else:
                return None

    async def _send_response(self, stream, conn, response: Response, keep_alive: bool, head: bool) -> None:
        headers = [*response.headers, ("Content-Length", str(len(response.body)))]
        if not keep_alive:
            headers.append(("Connection", "close"))
        data = conn.send(h11.Response(status_code=response.status, headers=headers, reason=_reason(response.status)))
        data += conn.send(h11.Data(data=response.body)) if response.body and not head else b""
        data += conn.send(h11.EndOfMessage())
        await stream.send_all(data)

    async def _send_bad_request(self, stream, conn, exc) -> None:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        body = f"400 Bad Request: {exc}".encode()
        data = conn.send(h11.Response(status_code=400, reason=b"Bad Request", headers=[
            ("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
            ("Connection", "close")]))
        await stream.send_all(data + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))


def _reason(status: int) -> bytes:
    """The status line's reason phrase in Go's words (Python 3.13 calls 413 "Content Too Large")."""
    if status == 413:
        return b"Request Entity Too Large"
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _peer(stream) -> str:
    try:
        name = stream.socket.getpeername()
    except (AttributeError, OSError):
        return "unknown"
    return f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
