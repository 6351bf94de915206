"""A small HTTP/1.1 server on trio for the daemons' APIs, parsing with httptools (llhttp).

Measured on this machine, hypercorn's trio worker serves ~1,200 requests/s and a trio
loop over h11 ~5,000 (measured when the stack was chosen); nsqd's ``POST /pub`` needs more, so
requests are parsed by httptools' C parser and answers are written directly. Handlers
get a whole :class:`Request` (body read, bounded by ``max_body_size`` or by the route's
``body_limit``) and return a :class:`Response`; keep-alive and pipelining work as in Go's
net/http.

Hostile clients: a request line and headers longer than Go's limit (MaxHeaderBytes, 1 MiB,
plus the 4 KiB net/http reads beyond it) get Go's ``431``. A body over the limit is answered
once it has all been read (and dropped) while less than 256 KiB of it lies past the limit,
and the connection is kept, as Go's server discards that much of a body its handler left;
a longer one is answered at once, unread, and the connection closed. NSQ's Go servers set
no timeouts; here a request's line and headers must arrive within ``HEADER_TIMEOUT`` and the whole request
within ``READ_TIMEOUT`` (as Go's ReadHeaderTimeout and ReadTimeout: from the accept for
a connection's first request, from its first byte for the next ones), so slow clients
(slow-loris) cannot hold connections forever; they are closed without an answer, as Go
closes a connection whose read deadline passed.
"""

import logging
import os
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
IDLE_TIMEOUT = 120.0  # waiting for the next request on a kept-alive connection
HEADER_TIMEOUT = 10.0
READ_TIMEOUT = 60.0
MAX_HEADER_BYTES = (1 << 20) + 4096
WRITEV_PARTS = 512  # buffers a writev (Linux takes 1,024)
WRITE_BYTES = 256 * 1024  # bytes a writev of an answer, at most
MAX_POST_HANDLER_READ = 256 * 1024  # what net/http reads of a body its handler left, to keep the connection
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
    body_too_big: bool = False  # the body went past the server's limit (and was dropped)
    unread: bool = False  # answered before its body was all received: the connection cannot go on
    keep_alive: bool = True
    tls: object = None  # the connection's trio.SSLStream, on an HTTPS listener


@dataclass
class Response:
    status: int = 200
    body: bytes | list[bytes] = b""  # a list: the chunks of a long answer, sent without joining them
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response]]
BodyLimit = Callable[[str, str], int]  # (method, path) -> the most body bytes read before answering


class _RequestReader:
    """httptools callbacks: collect each request as it is parsed."""

    def __init__(self, body_limit: BodyLimit, remote: str, tls=None):
        self.body_limit = body_limit
        self.remote = remote
        self.tls = tls
        self.parser = httptools.HttpRequestParser(self)
        self.complete: list[Request] = []
        self.current: Request | None = None
        self.expects_continue = False
        self.began_at: float | None = trio.current_time()  # the first request's clocks start at the accept
        self.head_bytes = 0  # received since the current request's headers began
        self.in_body = False
        self._max_body_size = 0
        self._url = b""
        self._chunks: list[bytes] = []
        self._size = 0

    def on_message_begin(self) -> None:
        self._url, self._chunks, self._size = b"", [], 0
        self.current = Request("", "", "", {}, b"", self.remote, tls=self.tls)
        if self.began_at is None:
            self.began_at = trio.current_time()

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
        self._max_body_size = self.body_limit(request.method, request.path)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_body_size:
            request.body_too_big = True
        self.expects_continue = request.headers.get("expect", "").lower() == "100-continue"
        self.head_bytes = 0
        self.in_body = True

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._max_body_size:
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
        self.began_at = None
        self.in_body = False

    def gives_up(self) -> bool:
        """Whether the current request's body is too long to read past its limit: Go's handler
        reads limit + 1 bytes, then the server drops less than MAX_POST_HANDLER_READ more or
        closes the connection."""
        past = self._max_body_size + 1 + MAX_POST_HANDLER_READ
        declared = self.current.headers.get("content-length", "")
        if declared.isdigit():
            return int(declared) >= past
        return self._size >= past

    def read_deadline(self) -> float:
        """When the connection is closed unless more of the request arrives."""
        if self.began_at is None:
            return trio.current_time() + IDLE_TIMEOUT
        return self.began_at + (READ_TIMEOUT if self.in_body else HEADER_TIMEOUT)


class HTTPServer:
    def __init__(self, handler: Handler, max_body_size: int, name: str = "HTTP", body_limit: BodyLimit | None = None):
        self.handler = handler
        self.max_body_size = max_body_size
        self.body_limit = body_limit or (lambda method, path: max_body_size)
        self.name = name

    async def serve(self, listeners, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await trio.serve_listeners(self._serve_connection, listeners, task_status=task_status)

    async def _serve_connection(self, stream) -> None:
        remote = _peer(stream)
        try:
            tls = stream if isinstance(stream, trio.SSLStream) else None
            await self._handle_requests(stream, _RequestReader(self.body_limit, remote, tls))
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
        while True:
            with trio.move_on_at(reader.read_deadline()) as timer:
                data = await stream.receive_some(RECEIVE_SIZE)
            if timer.cancelled_caught:
                log.debug("%s: closing %s: request not received in time", self.name, reader.remote)
                return
            if not data:
                return
            if not reader.in_body:
                reader.head_bytes += len(data)
                if reader.head_bytes > MAX_HEADER_BYTES:
                    await stream.send_all(_refusal(431, "431 Request Header Fields Too Large"))
                    return
            try:
                reader.parser.feed_data(data)
            except httptools.HttpParserError as exc:
                # a callback's own error (an HTTP version we do not serve) says more than llhttp's
                reason = exc.__context__ if isinstance(exc.__context__, httptools.HttpParserError) else exc
                await stream.send_all(_bad_request(str(reason)))
                return
            for request in _take(reader.complete):
                if not await self._answer(stream, request):
                    return
                continue_sent = False
            pending = reader.current
            if pending is not None and pending.body_too_big and (reader.gives_up() or reader.expects_continue):
                pending.unread = True  # answer now; the rest of the body is not read
                await self._answer(stream, pending)
                return
            if reader.expects_continue and not continue_sent:
                # as Go's server does once a handler reads the body; curl waits 1 s otherwise
                await stream.send_all(CONTINUE)
                continue_sent = True

    async def _answer(self, stream, request: Request) -> bool:
        """Run the handler and send its response; whether the connection stays open."""
        response = await self.handler(request)
        keep_alive = request.keep_alive and not request.unread
        await _send(stream, _head(response, keep_alive), b"" if request.method == "HEAD" else response.body)
        return keep_alive


async def _send(stream, head: bytes, body: bytes | list[bytes]) -> None:
    """An answer, written straight to a plain socket with writev as the kernel takes it (trio's
    send_all costs as much as the write), waiting for room between writes; anything over TLS by the
    stream. Head and body are never joined where writev exists: copying a 6 MB /stats (twice) held
    the loop. ``body`` is bytes, or the chunks a long answer was built in (nsqd/chunks.py)."""
    parts = [head, *body] if isinstance(body, list) else [head, body]
    if not (isinstance(stream, trio.SocketStream) and hasattr(os, "writev")):
        await stream.send_all(b"".join(parts))
        return
    fd = stream.socket.fileno()
    while True:
        try:
            sent = os.writev(fd, _next_write(parts))
        except BlockingIOError:
            sent = 0
        written = 0
        while written < len(parts) and sent >= len(parts[written]):
            sent -= len(parts[written])
            written += 1
        del parts[:written]
        if not parts:
            return
        if sent:
            parts[0] = memoryview(parts[0])[sent:]
        await trio.lowlevel.wait_writable(fd)


def _next_write(parts: list) -> list:
    """The buffers of one writev: the first parts, up to WRITEV_PARTS of them and WRITE_BYTES (the last
    one cut short). On loopback the kernel also delivers what one write sends, in the writer's time: a
    6 MB /stats in one writev was a 10-25 ms step of the loop on a busy machine."""
    batch, size = [], 0
    for part in parts[:WRITEV_PARTS]:
        if size + len(part) > WRITE_BYTES:
            batch.append(memoryview(part)[:WRITE_BYTES - size])
            break
        batch.append(part)
        size += len(part)
    return batch


def _body_length(body: bytes | list[bytes]) -> int:
    return sum(map(len, body)) if isinstance(body, list) else len(body)


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


def _head(response: Response, keep_alive: bool) -> bytes:
    """The status line and headers, up to the body."""
    lines = [b"HTTP/1.1 %d %s" % (response.status, _reason(response.status))]
    lines += [f"{name}: {value}".encode("latin-1") for name, value in response.headers]
    lines.append(b"Date: " + _date())
    lines.append(b"Content-Length: %d" % _body_length(response.body))
    if not keep_alive:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _refusal(status: int, text: str) -> bytes:
    """Go's net/http answer to a request it will not read: plain text, then the connection closes."""
    response = Response(status, text.encode(), [("Content-Type", "text/plain; charset=utf-8")])
    return _head(response, False) + response.body


def _bad_request(reason: str) -> bytes:
    return _refusal(400, f"400 Bad Request: {reason}")


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
