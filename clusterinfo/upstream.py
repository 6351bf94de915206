"""The HTTP client of nsqadmin and the utilities for nsqd and nsqlookupd (internal/http_api/api_request.go),
on httpx.

Pooled keep-alive connections with NSQ's deadlines: a connect timeout and a request
timeout that bounds the whole exchange, body included. There is one ``httpx.AsyncClient``
pool per daemon (scheme and host:port), not one for all: httpcore checks every
connection of a pool on each request, so a single pool over 20 nsqd made every page pay
for 20 x 20 connection checks (profiled: 40 % of nsqadmin's CPU time on the topic API). V1 requests
send ``Accept: application/vnd.nsq; version=1.0``; an answer other than 200 is an error
``got response <status> "<body>"``, except a 403 from a plain-HTTP address, which is
retried over HTTPS at the ``https_port`` the answer names (nsqd with --tls-required).

Errors read like Go's (``Get "http://host/stats?format=json": dial tcp host: connect:
connection refused``) because nsqadmin shows them to operators and returns them in
its API's ``message``.
"""

import asyncio
import json
import os
import socket
import ssl
from http import HTTPStatus
from urllib.parse import urlsplit, urlunsplit

import httpx

from common.goquote import go_quote

ACCEPT_V1 = {"Accept": "application/vnd.nsq; version=1.0"}


def nsqd_headers(auth_secret: str) -> dict[str, str]:
    """What nsqadmin sends nsqd: ACCEPT_V1, and --nsqd-auth-secret as a bearer secret if set
    (never sent to nsqlookupd, which has no use for it)."""
    return ACCEPT_V1 | {"Authorization": f"Bearer {auth_secret}"} if auth_secret else ACCEPT_V1


class UpstreamError(Exception):
    """A request to an nsqd or nsqlookupd that failed; the text says where and why, and
    ``code`` is the daemon's V1 error code (``TOPIC_NOT_FOUND``) when it answered with one."""

    def __init__(self, text: str, code: str = ""):
        super().__init__(text)
        self.code = code


def _error_code(body: bytes) -> str:
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        return ""
    return message if isinstance(message, str) else ""


def client_ssl_context(insecure_skip_verify: bool, root_ca_file: str, cert_file: str, key_file: str) -> ssl.SSLContext:
    """The TLS settings of --http-client-tls-*; OSError/SSLError if a file cannot be used."""
    context = ssl.create_default_context(cafile=root_ca_file or None)
    if insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    return context


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _causes(exc: BaseException):
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def go_dial_error(address: str, host: str, cause: BaseException) -> str | None:
    """What Go's dialer or TLS handshake says of ``cause`` (``dial tcp host:port: connect: connection
    refused``), connecting to ``address`` (host:port) of ``host``; None for any other error."""
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"tls: failed to verify certificate: {cause.verify_message} (CERTIFICATE_VERIFY_FAILED)"
    if isinstance(cause, ssl.SSLError):
        return f"tls: {cause.reason or cause}"
    if isinstance(cause, socket.gaierror):
        return f"dial tcp: lookup {host}: no such host"
    if isinstance(cause, OSError) and cause.errno:
        return f"dial tcp {address}: connect: {os.strerror(cause.errno).lower()}"
    return None


def _dial_error(url: str, exc: Exception) -> str:
    parts = urlsplit(url)
    if isinstance(exc, httpx.ConnectTimeout):
        return f"dial tcp {parts.netloc}: i/o timeout"
    for cause in _causes(exc):
        reason = go_dial_error(parts.netloc, parts.hostname, cause)
        if reason is not None:
            return reason
    return f"dial tcp {parts.netloc}: {exc or type(exc).__name__}"


def _failure(method: str, url: str, exc: Exception) -> UpstreamError:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        reason = _dial_error(url, exc)
    elif isinstance(exc, TimeoutError | httpx.TimeoutException):
        reason = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    elif isinstance(exc, httpx.RemoteProtocolError):
        reason = "EOF"
    else:
        reason = str(exc) or type(exc).__name__
    return UpstreamError(f'{method.title()} "{url}": {reason}')


def _https_url(url: str, body: bytes) -> str | None:
    """Where a 403 ``{"https_port": N}`` from nsqd says to go instead."""
    try:
        port = json.loads(body).get("https_port")
    except (ValueError, AttributeError):
        return None
    if type(port) is not int or not 0 < port < 65536:
        return None
    parts = urlsplit(url)
    return urlunsplit(("https", f"{parts.hostname}:{port}", parts.path, parts.query, ""))


class Upstream:
    """V1 GETs and POSTs to the cluster's daemons, each bounded by the request timeout."""

    def __init__(self, connect_timeout: float, request_timeout: float, ssl_context: ssl.SSLContext | None = None):
        self.request_timeout = request_timeout
        self._timeout = httpx.Timeout(request_timeout, connect=connect_timeout)
        self._verify = ssl_context if ssl_context is not None else True
        self._pools: dict[tuple[str, str], httpx.AsyncClient] = {}

    def _pool(self, url: str) -> httpx.AsyncClient:
        parts = urlsplit(url)
        pool = self._pools.get((parts.scheme, parts.netloc))
        if pool is None:
            pool = httpx.AsyncClient(timeout=self._timeout, verify=self._verify,
                                     limits=httpx.Limits(max_connections=64, max_keepalive_connections=16))
            self._pools[(parts.scheme, parts.netloc)] = pool
        return pool

    async def aclose(self) -> None:
        for pool in self._pools.values():
            await pool.aclose()

    async def request(self, method: str, url: str, **options) -> httpx.Response:
        """One exchange within the request timeout; UpstreamError, worded like Go's, if it fails."""
        try:
            async with asyncio.timeout(self.request_timeout):
                return await self._pool(url).request(method, url, **options)
        except (httpx.HTTPError, TimeoutError, OSError, ssl.SSLError) as exc:
            raise _failure(method, url, exc) from exc

    async def _v1(self, method: str, url: str, headers: dict[str, str], body: bytes | None = None) -> bytes:
        response = await self.request(method, url, headers=headers, content=body)
        if response.status_code == 403 and url.startswith("http:"):
            https = _https_url(url, response.content)
            if https is not None:
                return await self._v1(method, https, headers, body)
        if response.status_code != 200:
            raise UpstreamError(f"got response {_status_line(response.status_code)} {go_quote(response.content)}",
                                _error_code(response.content))
        return response.content

    async def get_v1(self, url: str, headers: dict[str, str] = ACCEPT_V1):
        """The JSON of a V1 GET (``headers``: ACCEPT_V1 and any others)."""
        body = await self._v1("GET", url, headers)
        try:
            return json.loads(body)
        except ValueError as exc:
            raise UpstreamError(f'Get "{url}": the answer is not JSON ({exc})') from exc

    async def post_v1(self, url: str, headers: dict[str, str] = ACCEPT_V1) -> None:
        await self._v1("POST", url, headers)

    async def put_v1(self, url: str, body: bytes, headers: dict[str, str] = ACCEPT_V1) -> None:
        await self._v1("PUT", url, headers, body)

    async def post_json(self, url: str, body: bytes) -> int:
        """POST a JSON document (a notification); the answer's status."""
        response = await self.request("POST", url, content=body, headers={"Content-Type": "application/json"})
        return response.status_code
