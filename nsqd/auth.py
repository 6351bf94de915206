"""Authorization by an external auth server (internal/auth/authorizations.go).

A client's AUTH secret is sent to one of --auth-http-address (starting at a random one,
then each in turn until one answers) with the client's IP, TLS state and certificate
common name. The answer, cached for its ``ttl`` seconds and asked again when a command
needs it after that, lists what the client may do::

    {"ttl": 3600, "identity": "username", "identity_url": "https://...",
     "authorizations": [{"permissions": ["subscribe", "publish"], "topic": ".*", "channels": [".*"]}]}

Topic and channel patterns are regular expressions matched anywhere in the name (Go's
MatchString, unanchored); a publish is checked against the channel ``""``. Go's RE2
syntax is read as Python's ``re``, which is the same for the usual patterns.

Every query (AUTH, and --http-auth-required's) goes through one HTTP client made at start
with nsqd's client TLS context and closed when nsqd stops (NSQ makes a client per query,
which costs Go little; a new httpx client per query cost the event loop its set-up each time).
httpx is imported with that client, so an nsqd without auth servers never loads it.
"""

import json
import random
import re
import time
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlencode, urlsplit, urlunsplit

import trio

if TYPE_CHECKING:
    import httpx

ACCEPT_V1 = "application/vnd.nsq; version=1.0"
PERMISSIONS = ("subscribe", "publish")


class AuthError(Exception):
    """The auth server could not be asked, or its answer cannot be used. Only logged:
    the client is told ``E_AUTH_FAILED``, never why."""


class Authorization(NamedTuple):
    topic: re.Pattern
    channels: tuple[re.Pattern, ...]
    permissions: frozenset[str]

    def allows(self, topic: str, channel: str) -> bool:
        if ("subscribe" if channel else "publish") not in self.permissions:
            return False
        if not self.topic.search(topic):
            return False
        return any(pattern.search(channel) for pattern in self.channels)


class AuthState(NamedTuple):
    identity: str
    identity_url: str
    authorizations: tuple[Authorization, ...]
    expires: float  # time.monotonic()

    def allows(self, topic: str, channel: str) -> bool:
        return any(authorization.allows(topic, channel) for authorization in self.authorizations)

    def expired(self) -> bool:
        return time.monotonic() >= self.expires


class AuthQuery(NamedTuple):
    """What nsqd tells the auth server about a client."""

    remote_ip: str
    tls: bool
    secret: bytes
    common_name: str

    def values(self) -> list[tuple[str, bytes | str]]:
        """Go's url.Values, in its Encode() order (sorted keys)."""
        return [("common_name", self.common_name), ("remote_ip", self.remote_ip),
                ("secret", self.secret), ("tls", "true" if self.tls else "false")]


class AuthServers:
    def __init__(self, addresses: list[str], method: str, connect_timeout: float, request_timeout: float,
                 ssl_context):
        self.addresses = addresses
        self.method = method
        import httpx

        self._http = httpx.AsyncClient(timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
                                       verify=ssl_context)

    async def run(self) -> None:
        """Keep the client while nsqd runs; close it when nsqd stops."""
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await self._http.aclose()

    async def query(self, query: AuthQuery) -> AuthState:
        """Ask the servers in turn from a random one; the first usable answer wins."""
        start = random.randrange(len(self.addresses))
        failures = []
        for index in range(len(self.addresses)):
            address = self.addresses[(start + index) % len(self.addresses)]
            try:
                return await self._query_one(address, query)
            except AuthError as exc:
                failures.append(f"failed to auth against {address} - {exc}")
        raise AuthError("; ".join(failures))

    async def _query_one(self, address: str, query: AuthQuery) -> AuthState:
        import httpx

        endpoint = address if "://" in address else f"http://{address}/auth"
        try:
            response = await self._request(endpoint, query)
            if response.status_code == 403 and not endpoint.startswith("https"):
                response = await self._request(_https_endpoint(endpoint, response.content), query)
        except httpx.HTTPError as exc:
            raise AuthError(str(exc) or type(exc).__name__) from None
        if response.status_code != 200:
            raise AuthError(f"got response {response.status_code} {response.content!r}")
        return parse_auth_state(response.content)

    async def _request(self, endpoint: str, query: AuthQuery) -> "httpx.Response":
        headers = {"Accept": ACCEPT_V1}
        if self.method == "post":
            body = {key: [value.decode("utf-8", "replace") if isinstance(value, bytes) else value]
                    for key, value in query.values()}
            return await self._http.post(endpoint, headers=headers, json=body)
        return await self._http.get(f"{endpoint}?{urlencode(query.values())}", headers=headers)


def _https_endpoint(endpoint: str, body: bytes) -> str:
    """A 403 from nsqd-style servers names their HTTPS port: ask there instead."""
    try:
        port = int(json.loads(body)["https_port"])
    except (ValueError, KeyError, TypeError):
        raise AuthError(f"got response 403 {body!r}") from None
    parts = urlsplit(endpoint)
    return urlunsplit(("https", f"{parts.hostname}:{port}", parts.path, parts.query, ""))


def parse_auth_state(body: bytes) -> AuthState:
    """The auth server's answer, checked as nsqd checks it."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise AuthError(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AuthError("the answer is not a JSON object")
    ttl = _field(data, "ttl", int, 0)
    authorizations = tuple(_authorization(item) for item in _field(data, "authorizations", list, []))
    if ttl <= 0:
        raise AuthError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(_field(data, "identity", str, ""), _field(data, "identity_url", str, ""),
                     authorizations, time.monotonic() + ttl)


def _field(data: dict, name: str, kind: type, default):
    """A JSON field as Go's json.Unmarshal fills a struct field: null or absent is the zero value."""
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise AuthError(f"{name}: cannot use {value!r} as {kind.__name__}")
    return value


def _authorization(item) -> Authorization:
    if not isinstance(item, dict):
        raise AuthError(f"authorization {item!r} is not an object")
    permissions = _strings(item, "permissions")
    for permission in permissions:
        if permission not in PERMISSIONS:
            raise AuthError(f"unknown permission {permission}")
    topic = _field(item, "topic", str, "")
    return Authorization(_compile(topic, "topic"), tuple(_compile(c, "channel") for c in _strings(item, "channels")),
                         frozenset(permissions))


def _strings(item: dict, name: str) -> list[str]:
    values = _field(item, name, list, [])
    if not all(isinstance(value, str) for value in values):
        raise AuthError(f"{name}: {values!r} is not a list of strings")
    return values


def _compile(pattern: str, what: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise AuthError(f"unable to compile {what} {pattern!r} {exc}") from None
