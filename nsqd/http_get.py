"""nsqd's questions to its nsqlookupds' HTTP APIs: a small keep-alive HTTP/1.1 GET client on trio.

Before a new topic starts, nsqd asks every connected nsqlookupd for the topic's channels
(nsqd/lookup.py), so this runs at every new topic. Through httpx each question cost the event
loop ~1.3 ms of CPU, in steps of up to 0.8 ms (its connection pool, anyio and request and
response models), where the question is one small write and one small answer. Here the request
is one write and the answer is parsed by httptools, the parser of nsqd's own HTTP server.

As Go's http.Transport under NSQ's internal/http_api client, a connection is kept for the next
request to the same address, and a request that finds its kept connection closed by the server
before any answer is sent again on a new one. The request carries NSQ's ``Accept`` for the V1
API. A request that gets no answer fails with Go's client's words for it (``Get "URL": dial tcp
ADDR: connect: connection refused``); --http-client-connect-timeout bounds the connect, and
--http-client-request-timeout the whole request.
"""

import math
from typing import NamedTuple

import httptools
import trio

from .lookup_peer import dial_error_text

ACCEPT_V1 = "application/vnd.nsq; version=1.0"
MAX_IDLE_PER_ADDRESS = 2  # Go's http.DefaultMaxIdleConnsPerHost
RECEIVE_BYTES = 65536


class HTTPGetError(Exception):
    """A request that got no answer, as Go's http.Client words it."""


class Answer(NamedTuple):
    status: int
    reason: str
    body: bytes


class _ClosedBeforeAnswer(Exception):
    """The server closed the connection before any byte of the answer: Go's ``EOF``."""


class _DialError(Exception):
    """The connect failed, in Go's net package's words."""


def join_host_port(host: str, port: int) -> str:
    """Go's net.JoinHostPort: an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bound(seconds: float) -> float:
    """A timeout flag's seconds as a deadline's: 0 (Go's zero duration) is none."""
    return seconds if seconds > 0 else math.inf


def http_url(host: str, port: int, target: str) -> str:
    return f"http://{join_host_port(host, port)}{target}"


class _Response:
    """One answer, parsed as it arrives: the parser calls back with its parts."""

    def __init__(self):
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self.reason = b""
        self.body: list[bytes] = []
        self.started = False
        self.complete = False
        self.keep_alive = False  # asked as the answer completes: the parser forgets it after

    def feed(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def answer(self) -> Answer:
        return Answer(self.parser.get_status_code(), self.reason.decode("latin-1"), b"".join(self.body))

    def forget_parser(self) -> None:
        """Break the cycle between the parser and its callbacks, so reference counting frees both."""
        self.parser = None

    def on_message_begin(self) -> None:
        self.started = True

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True


class HTTPGetter:
    """GETs for one nsqd, with the connections kept between them (closed by ``aclose``)."""

    def __init__(self, connect_timeout: float, request_timeout: float):
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._idle: dict[str, list[trio.SocketStream]] = {}

    async def get(self, host: str, port: int, target: str) -> Answer:
        """``GET target`` from ``host:port``: its answer, whatever its status; HTTPGetError if none."""
        address = join_host_port(host, port)
        request = f"GET {target} HTTP/1.1\r\nHost: {address}\r\nAccept: {ACCEPT_V1}\r\n\r\n".encode()
        url = http_url(host, port, target)
        with trio.move_on_after(_bound(self.request_timeout)):
            try:
                return await self._exchange(host, port, address, request)
            except _DialError as exc:
                raise HTTPGetError(f'Get "{url}": {exc}') from exc
            except _ClosedBeforeAnswer:
                raise HTTPGetError(f'Get "{url}": EOF') from None
            except httptools.HttpParserError as exc:
                raise HTTPGetError(f'Get "{url}": malformed HTTP response: {exc}') from exc
            except (OSError, trio.BrokenResourceError) as exc:
                raise HTTPGetError(f'Get "{url}": {str(exc) or type(exc).__name__}') from exc
        raise HTTPGetError(f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)')

    async def aclose(self) -> None:
        for streams in self._idle.values():
            for stream in streams:
                await trio.aclose_forcefully(stream)
        self._idle.clear()

    async def _exchange(self, host: str, port: int, address: str, request: bytes) -> Answer:
        """The answer, on a kept connection if one still works, else on a new one."""
        idle = self._idle.get(address, [])
        while idle:
            try:
                return await self._round_trip(address, idle.pop(), request)
            except _ClosedBeforeAnswer:
                continue
        return await self._round_trip(address, await self._connect(host, port, address), request)

    async def _connect(self, host: str, port: int, address: str) -> trio.SocketStream:
        with trio.move_on_after(_bound(self.connect_timeout)):
            try:
                return await trio.open_tcp_stream(host, port)
            except OSError as exc:
                raise _DialError(dial_error_text(address, exc)) from exc
        raise _DialError(f"dial tcp {address}: i/o timeout")

    async def _round_trip(self, address: str, stream: trio.SocketStream, request: bytes) -> Answer:
        """Send ``request`` and read its answer; the connection is kept after it if the answer allows."""
        response = _Response()
        try:
            await stream.send_all(request)
            while not response.complete:
                data = await stream.receive_some(RECEIVE_BYTES)
                if not data:
                    if response.started:
                        raise trio.BrokenResourceError("unexpected EOF")
                    raise _ClosedBeforeAnswer()
                response.feed(data)
            answer = response.answer()
        except (OSError, trio.BrokenResourceError) as exc:
            await trio.aclose_forcefully(stream)
            if response.started:
                raise
            raise _ClosedBeforeAnswer() from exc  # reset or broken: as good as closed
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        finally:
            response.forget_parser()
        await self._keep_or_close(address, stream, response.keep_alive)
        return answer

    async def _keep_or_close(self, address: str, stream: trio.SocketStream, keep_alive: bool) -> None:
        idle = self._idle.setdefault(address, [])
        if keep_alive and len(idle) < MAX_IDLE_PER_ADDRESS:
            idle.append(stream)
        else:
            await trio.aclose_forcefully(stream)
