"""The recorder's HTTP client: V1 GETs to nsqd over one keep-alive HTTP/1.1 connection per nsqd.

Theory of operation. The recorder asks every nsqd for its whole ``/stats`` once a poll, so
the cost of one large GET is what counts. Through upstream.Upstream (httpx) a 75 kB
``/stats`` costs ~2.4 ms of CPU on the 2-core test machine; an asyncio protocol feeding
httptools' C parser costs ~0.12 ms, most of it the kernel's. So the recorder keeps one
connection per nsqd and sends one GET at a time on it, and a poll asks every nsqd at once
(``get_all``): on a connection already open a GET is a write and a future, and the poll
waits for them all under one deadline, as a task and a timeout of its own for each GET
cost a tenth of a whole poll of 10 nsqd. The connections read into one buffer, the
fetcher's, parsed as soon as it is filled. nsqd may close an idle keep-alive connection
just as a GET goes out: a GET lost on a connection that had already served one is sent
again, once, on a new connection (GETs are safe to repeat), within the same deadline.

nsqd with ``--tls-required`` answers plain HTTP with 403 ``{"https_port": N}``: from then
on the fetcher asks it over HTTPS at that port, with the --http-client-tls-* settings,
as upstream.py does. Errors read like upstream.py's (``Get "http://host/stats": dial tcp
host: connect: connection refused``), since they end up in the same log.
"""

import asyncio
import json
import ssl

import httptools

from clusterinfo.upstream import go_dial_error
from common.goquote import go_quote

ACCEPT_V1 = b"application/vnd.nsq; version=1.0"
READ_BUFFER = 256 * 1024  # asyncio's own read size


class FetchError(Exception):
    """A GET that failed; the text says which and why."""


class _Failure(OSError):
    """A failure already worded as Go words it (``EOF``, ``dial tcp host:port: i/o timeout``)."""


class _Lost(_Failure):
    """The connection closed before the whole answer came."""


def https_port(body: bytes) -> int | None:
    """The port a 403 ``{"https_port": N}`` from nsqd names, if it names one."""
    try:
        port = json.loads(body).get("https_port")
    except (ValueError, AttributeError):
        return None
    return port if type(port) is int and 0 < port < 65536 else None


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` as (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class _Connection(asyncio.BufferedProtocol):
    """One connection to an nsqd: a GET at a time, its status and body. The socket is read into
    ``buffer``, which the fetcher's connections share: each read is parsed (and the body copied
    out) before the next."""

    def __init__(self, buffer: memoryview):
        self._buffer = buffer
        self._parser = httptools.HttpResponseParser(self)
        self._answer: asyncio.Future | None = None
        self._body: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    @property
    def open(self) -> bool:
        return not self.closed and not self.transport.is_closing()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self._parser.feed_data(self._buffer[:nbytes])
        except httptools.HttpParserError as exc:
            self._settle(error=_Failure(f"malformed HTTP answer ({exc})"))
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        body, self._body = b"".join(self._body), []
        self._settle(answer=(self._parser.get_status_code(), body))
        if not self._parser.should_keep_alive():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._settle(error=_Lost("EOF"))

    def _settle(self, answer=None, error: Exception | None = None) -> None:
        pending, self._answer = self._answer, None
        if pending is None or pending.done():
            return
        if error is not None:
            pending.set_exception(error)
        else:
            pending.set_result(answer)

    def send(self, request: bytes) -> asyncio.Future:
        """Send a GET; the future of its (status, body). Whoever gives up on it closes the
        connection, whose state is then unknown."""
        self._answer = answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return answer

    async def get(self, request: bytes) -> tuple[int, bytes]:
        try:
            return await self.send(request)
        except asyncio.CancelledError:  # timed out or stopped mid-answer
            self.close()
            raise

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class StatsFetcher:
    """V1 GETs to nsqd, each bounded by the request timeout; FetchError if one fails."""

    def __init__(self, connect_timeout: float, request_timeout: float, ssl_context: ssl.SSLContext | None = None,
                 auth_secret: str = ""):
        self.connect_timeout = connect_timeout
        self._auth_header = b"Authorization: Bearer %s\r\n" % auth_secret.encode("latin-1") if auth_secret else b""
        self.request_timeout = request_timeout
        self._ssl = ssl_context or ssl.create_default_context()
        self._buffer = memoryview(bytearray(READ_BUFFER))
        self._connections: dict[str, _Connection] = {}  # address -> its connection (plain or TLS)
        self._https_ports: dict[str, int] = {}
        self.connects: dict[str, int] = {}  # address -> connections opened to it: a new one may be a new nsqd

    async def get(self, address: str, path: str) -> bytes:
        """The body of nsqd's 200 answer to ``GET path`` at ``address`` (its HTTP ``host:port``)."""
        answer = (await self.get_all([address], path))[0]
        if isinstance(answer, FetchError):
            raise answer
        return answer

    async def get_all(self, addresses: list[str], path: str) -> list[bytes | FetchError]:
        """Each address's answer to ``GET path``, all asked at once and within one request timeout:
        the body of a 200, else a FetchError.

        On a connection already open, a GET is a write and a future; only the rest (a first
        connection, a connection nsqd closed as the GET went out, a switch to HTTPS) takes a task
        of its own, as the cost of a task and a timeout for each of 10 nsqd is a tenth of a poll."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout
        answers: dict[str, bytes | FetchError] = {}
        attempts = {address: self._first_attempt(address, path, deadline) for address in addresses}
        while attempts:
            try:
                done, late = await asyncio.wait(attempts.values(), timeout=max(0.0, deadline - loop.time()))
            except asyncio.CancelledError:
                for address, attempt in attempts.items():
                    self._give_up(address, attempt)
                raise
            retries = {}
            for address, attempt in attempts.items():
                if attempt in late:
                    self._give_up(address, attempt)
                    answers[address] = FetchError(f'Get "{self._url(address, path)}": context deadline exceeded')
                elif self._again(address, attempt):
                    retries[address] = loop.create_task(self._exchange_within(address, path, deadline))
                else:
                    answers[address] = self._answer(address, path, attempt)
            attempts = retries
        return [answers[address] for address in addresses]

    def _first_attempt(self, address: str, path: str, deadline: float) -> asyncio.Future:
        connection = self._connections.get(address)
        if connection is None or not connection.open:
            return asyncio.get_running_loop().create_task(self._exchange_within(address, path, deadline))
        return connection.send(self._request(address, path))

    def _again(self, address: str, attempt: asyncio.Future) -> bool:
        """Whether a GET sent on an open connection is to be asked again on a new one: nsqd closed
        the connection as the GET went out (GETs are safe to repeat), or it wants HTTPS."""
        if isinstance(attempt, asyncio.Task):  # already on a new connection
            return False
        if (error := attempt.exception()) is not None:
            return isinstance(error, _Lost)
        status, body = attempt.result()
        return status == 403 and self._switch_to_https(address, body)

    def _give_up(self, address: str, attempt: asyncio.Future) -> None:
        """Stop waiting for an attempt; a connection left mid-answer is closed."""
        attempt.cancel()
        if not isinstance(attempt, asyncio.Task) and (connection := self._connections.get(address)) is not None:
            connection.close()

    def _answer(self, address: str, path: str, attempt: asyncio.Future) -> bytes | FetchError:
        error = attempt.exception()
        if isinstance(error, TimeoutError):  # the task's own deadline, as asyncio.wait's came
            return FetchError(f'Get "{self._url(address, path)}": context deadline exceeded')
        if error is not None:
            if not isinstance(error, OSError):
                raise error
            return FetchError(f'Get "{self._url(address, path)}": {self._reason(address, error)}')
        status, body = attempt.result()
        if status != 200:
            return FetchError(f'Get "{self._url(address, path)}": got response {status} {go_quote(body[:200])}')
        return body

    def _switch_to_https(self, address: str, body: bytes) -> bool:
        """Whether a 403 is nsqd's ``{"https_port": N}``, and so the address is now asked over HTTPS."""
        if address in self._https_ports or not (port := https_port(body)):
            return False
        self._https_ports[address] = port
        if (plain := self._connections.pop(address, None)) is not None:
            plain.close()
        return True

    def _url(self, address: str, path: str) -> str:
        if address in self._https_ports:
            return f"https://{split_address(address)[0]}:{self._https_ports[address]}{path}"
        return f"http://{address}{path}"

    def _request(self, address: str, path: str) -> bytes:
        return b"GET %s HTTP/1.1\r\nHost: %s\r\nAccept: %s\r\n%s\r\n" % (path.encode(), address.encode(), ACCEPT_V1,
                                                                       self._auth_header)

    def _reason(self, address: str, exc: OSError) -> str:
        """What Go's client says: ``dial tcp host:port: connect: connection refused``."""
        if isinstance(exc, _Failure):
            return str(exc)
        return go_dial_error(address, split_address(address)[0], exc) or str(exc)

    async def _exchange_within(self, address: str, path: str, deadline: float) -> tuple[int, bytes]:
        """(status, body) of a GET on a new connection, and again over HTTPS if nsqd asks for it."""
        async with asyncio.timeout_at(deadline):
            status, body = await self._exchange(address, path)
            if status == 403 and self._switch_to_https(address, body):
                status, body = await self._exchange(address, path)
        return status, body

    async def _exchange(self, address: str, path: str) -> tuple[int, bytes]:
        connection = self._connections.get(address)
        if connection is not None and connection.open:
            try:
                return await connection.get(self._request(address, path))
            except _Lost:  # nsqd closed the idle connection as the GET went out
                pass
        host, port = split_address(address)
        connection = await self._connect(host, self._https_ports.get(address, port), address in self._https_ports)
        self.connects[address] = self.connects.get(address, 0) + 1
        self._connections[address] = connection
        return await connection.get(self._request(address, path))

    async def _connect(self, host: str, port: int, tls: bool) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(lambda: _Connection(self._buffer), host, port,
                                                             ssl=self._ssl if tls else None,
                                                             server_hostname=host if tls else None)
        except TimeoutError:
            raise _Failure(f"dial tcp {host}:{port}: i/o timeout") from None
        return connection

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
