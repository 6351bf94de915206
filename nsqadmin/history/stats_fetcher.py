"""The recorder's HTTP client: V1 GETs to nsqd over one keep-alive HTTP/1.1 connection per nsqd.

Theory of operation. The recorder asks every nsqd for its whole ``/stats`` once a poll, so
the cost of one large GET is what counts. Through upstream.Upstream (httpx) a 75 kB
``/stats`` costs ~2.4 ms of CPU on the 2-core test machine; an asyncio protocol feeding
httptools' C parser costs ~0.12 ms. So the recorder keeps one connection per nsqd and
sends one GET at a time on it. nsqd may close an idle keep-alive connection just as a
GET goes out: a GET lost on a connection that had already served one is sent again,
once, on a new connection (GETs are safe to repeat).

nsqd with ``--tls-required`` answers plain HTTP with 403 ``{"https_port": N}``: from then
on the fetcher asks it over HTTPS at that port, with the --http-client-tls-* settings,
as upstream.py does. Errors read like upstream.py's (``Get "http://host/stats": dial tcp
host: connect: connection refused``), since they end up in the same log.
"""

import asyncio
import json
import os
import socket
import ssl

import httptools

from common.goquote import go_quote

ACCEPT_V1 = b"application/vnd.nsq; version=1.0"


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


class _Connection(asyncio.Protocol):
    """One connection to an nsqd: a GET at a time, its status and body."""

    def __init__(self):
        self._parser = httptools.HttpResponseParser(self)
        self._answer: asyncio.Future | None = None
        self._body: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
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
        if self._answer is None or self._answer.done():
            return
        if error is not None:
            self._answer.set_exception(error)
        else:
            self._answer.set_result(answer)

    async def get(self, request: bytes) -> tuple[int, bytes]:
        self._answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            return await self._answer
        except asyncio.CancelledError:  # timed out or stopped mid-answer: the connection's state is unknown
            self.transport.close()
            raise
        finally:
            self._answer = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class StatsFetcher:
    """V1 GETs to nsqd, each bounded by the request timeout; FetchError if one fails."""

    def __init__(self, connect_timeout: float, request_timeout: float, ssl_context: ssl.SSLContext | None = None):
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._ssl = ssl_context or ssl.create_default_context()
        self._connections: dict[tuple[str, int, bool], _Connection] = {}
        self._https_ports: dict[str, int] = {}
        self.connects: dict[str, int] = {}  # address -> connections opened to it: a new one may be a new nsqd

    def _url(self, address: str, path: str) -> str:
        if address in self._https_ports:
            return f"https://{split_address(address)[0]}:{self._https_ports[address]}{path}"
        return f"http://{address}{path}"

    async def get(self, address: str, path: str) -> bytes:
        """The body of nsqd's 200 answer to ``GET path`` at ``address`` (its HTTP ``host:port``)."""
        try:
            async with asyncio.timeout(self.request_timeout):
                status, body = await self._exchange(address, path)
                if status == 403 and address not in self._https_ports and (port := https_port(body)):
                    self._https_ports[address] = port
                    status, body = await self._exchange(address, path)
        except TimeoutError:
            raise FetchError(f'Get "{self._url(address, path)}": context deadline exceeded') from None
        except OSError as exc:
            raise FetchError(f'Get "{self._url(address, path)}": {self._reason(address, exc)}') from exc
        if status != 200:
            raise FetchError(f'Get "{self._url(address, path)}": got response {status} {go_quote(body[:200])}')
        return body

    def _reason(self, address: str, exc: OSError) -> str:
        """What Go's client says: ``dial tcp host:port: connect: connection refused``."""
        if isinstance(exc, ssl.SSLCertVerificationError):
            return f"tls: failed to verify certificate: {exc.verify_message} (CERTIFICATE_VERIFY_FAILED)"
        if isinstance(exc, ssl.SSLError):
            return f"tls: {exc.reason or exc}"
        if isinstance(exc, socket.gaierror):
            return f"dial tcp: lookup {split_address(address)[0]}: no such host"
        if isinstance(exc, _Failure) or not exc.errno:
            return str(exc)
        return f"dial tcp {address}: connect: {os.strerror(exc.errno).lower()}"

    async def _exchange(self, address: str, path: str) -> tuple[int, bytes]:
        host, port = split_address(address)
        tls = address in self._https_ports
        if tls:
            port = self._https_ports[address]
        request = (b"GET %s HTTP/1.1\r\nHost: %s\r\nAccept: %s\r\n\r\n"
                   % (path.encode(), address.encode(), ACCEPT_V1))
        key = (host, port, tls)
        connection = self._connections.get(key)
        if connection is not None and not connection.closed:
            try:
                return await connection.get(request)
            except _Lost:  # nsqd closed the idle connection as the GET went out
                pass
        connection = await self._connect(host, port, tls)
        self.connects[address] = self.connects.get(address, 0) + 1
        self._connections[key] = connection
        return await connection.get(request)

    async def _connect(self, host: str, port: int, tls: bool) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(
                    _Connection, host, port, ssl=self._ssl if tls else None, server_hostname=host if tls else None)
        except TimeoutError:
            raise _Failure(f"dial tcp {host}:{port}: i/o timeout") from None
        return connection

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
