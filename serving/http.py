"""A small HTTP/1.1 server on trio for the daemons' APIs, parsing with httptools (llhttp).

Measured on this machine, hypercorn's trio worker serves ~1,200 requests/s and a trio
loop over h11 ~5,000 (shared/reference/stack.md); nsqd's ``POST /pub`` needs more, so
requests are parsed by httptools' C parser and answers are written directly. Handlers
get a whole :class:`Request` (body read, bounded by ``max_body_size``) and return a
:class:`Response`; keep-alive and pipelining work as in Go's net/http.
"""

import logging
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Awaitable, Callable
from urllib.parse import urlsplit

import httptools
import trio

from .listeners import socket_of

log = logging.getLogger("http")

RECEIVE_SIZE = 64 * 1024
IDLE_TIMEOUT = 120.0
DISCONNECTED = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass
class Request:
    method: str
    path: str
    query: str  # raw query string: each API parses it with its own rules
    headers: dict[str, str]
    body: bytes
    remote_address: str
    body_too_big: bool = False  # the body went past the server's limit and was not read
    keep_alive: bool = True


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response]]


class _RequestReader:
    """httptools callbacks: collect each request as it is parsed."""

    def __init__(self, max_body_size: int, remote: str):
        self.max_body_size = max_body_size
        self.remote = remote
        self.parser = httptools.HttpRequestParser(self)
        self.complete: list[Request] = []
        self.current: Request | None = None
        self.expects_continue = False
        self._url = b""
        self._chunks: list[bytes] = []
        self._size = 0

    def on_message_begin(self) -> None:
        self._url, self._chunks, self._size = b"", [], 0
        self.current = Request("", "", "", {}, b"", self.remote)

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.current.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        request = self.current
        if self.parser.get_http_version() not in ("1.0", "1.1"):
            raise httptools.HttpParserError(f"unsupported HTTP version {self.parser.get_http_version()}")
        target = urlsplit(self._url.decode("latin-1"))
        request.method = self.parser.get_method().decode("ascii", "replace")
        request.path, request.query = target.path, target.query
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_size:
            request.body_too_big = True
        self.expects_continue = request.headers.get("expect", "").lower() == "100-continue"

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self.max_body_size:
            self.current.body_too_big = True
        elif not self.current.body_too_big:
            self._chunks.append(body)

    def on_message_complete(self) -> None:
        request = self.current
        request.body = b"".join(self._chunks) if not request.body_too_big else b""
        request.keep_alive = self.parser.should_keep_alive()
        self.complete.append(request)
        self.current = None
        self.expects_continue = False


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
            await self._handle_requests(stream, _RequestReader(self.max_body_size, remote))
        except DISCONNECTED:
            pass
        except Exception:
            log.exception("%s: unexpected error serving %s", self.name, remote)
        finally:
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await stream.aclose()

    async def _handle_requests(self, stream, reader: _RequestReader) -> None:
        continue_sent = False
        with trio.CancelScope() as idle:
            while True:
                idle.deadline = trio.current_time() + IDLE_TIMEOUT
                data = await stream.receive_some(RECEIVE_SIZE)
                if not data:
                    return
                try:
                    reader.parser.feed_data(data)
                except httptools.HttpParserError as exc:
                    await stream.send_all(_bad_request(str(exc)))
                    return
                for request in _take(reader.complete):
                    if not await self._answer(stream, request):
                        return
                    continue_sent = False
                pending = reader.current
                if pending is not None and pending.body_too_big:
                    pending.keep_alive = False  # answer now; the rest of the body is not read
                    await self._answer(stream, pending)
                    return
                if reader.expects_continue and not continue_sent:
                    # as Go's server does once a handler reads the body; curl waits 1 s otherwise
                    await stream.send_all(CONTINUE)
                    continue_sent = True

    async def _answer(self, stream, request: Request) -> bool:
        """Run the handler and send its response; whether the connection stays open."""
        response = await self.handler(request)
        keep_alive = request.keep_alive and not request.body_too_big
        await stream.send_all(_encode(response, keep_alive, request.method == "HEAD"))
        return keep_alive


def _take(requests: list[Request]) -> list[Request]:
    taken = requests[:]
    requests.clear()
    return taken


_date_cache = [0, b""]


def _date() -> bytes:
    """The Date header's value, formatted once a second."""
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[:] = [now, formatdate(now, usegmt=True).encode()]
    return _date_cache[1]


def _encode(response: Response, keep_alive: bool, head: bool) -> bytes:
    lines = [b"HTTP/1.1 %d %s" % (response.status, _reason(response.status))]
    lines += [f"{name}: {value}".encode("latin-1") for name, value in response.headers]
    lines.append(b"Date: " + _date())
    lines.append(b"Content-Length: %d" % len(response.body))
    if not keep_alive:
        lines.append(b"Connection: close")
    head_bytes = b"\r\n".join(lines) + b"\r\n\r\n"
    return head_bytes if head else head_bytes + response.body


def _bad_request(reason: str) -> bytes:
    body = f"400 Bad Request: {reason}".encode()
    return _encode(Response(400, body, [("Content-Type", "text/plain; charset=utf-8")]), False, False)


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
        name = socket_of(stream).getpeername()
    except (AttributeError, OSError):
        return "unknown"
    return f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
