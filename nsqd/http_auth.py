"""Access control for nsqd's HTTP API (beyond NSQ: --http-auth-required).

NSQ's AUTH covers the TCP protocol only; its HTTP API is open to whoever reaches it, and
NSQ's answer has been to put it behind a proxy of one's own (nsqio/nsq#1183, #1426). With
--http-auth-required, every route but ``/ping`` and ``/info`` needs the secret a TCP
client would give AUTH, as ``Authorization: Bearer <secret>``. nsqd asks the same auth
servers with the same query (nsqd/auth.py: the secret, the client's IP, TLS state and
certificate common name) and checks the answer the same way; an answer is kept for its
``ttl`` per (secret, IP, TLS identity), at most CACHE_SIZE of them, and requests that
need the same answer at once share one query.

A request is allowed as the TCP command with the same effect would be:

* ``POST /pub``, ``/mpub``, ``/topic/create``: ``publish`` on the topic (as PUB);
* ``POST /channel/create|delete|empty|pause|unpause|max_attempts|pace``, ``GET /channel/peek``:
  ``subscribe`` on the topic and channel (as SUB);
* ``POST /topic/delete|empty|pause|unpause|ttl|max_queue_bytes``, which act on every channel of the topic:
  ``publish`` on the topic and ``subscribe`` on each of its channels;
* ``GET /stats``, ``/metrics``: any grant; they show only the topics that some grant's
  topic pattern matches (and of producers, only their counts for those topics);
* ``GET|PUT /config/:opt``, which change the whole nsqd: a grant of both permissions
  whose topic and channel patterns are ``.*``.

Answers: 401 ``AUTH_REQUIRED`` without a bearer secret, 401 ``AUTH_FAILED`` when the auth
servers refuse it or cannot be asked (why is logged, as for AUTH), 403 ``FORBIDDEN``
when the grants do not cover the request. A request whose arguments are missing or
invalid gets the route's own 400 once its secret is good. Unknown routes stay 404.
"""

import logging

import trio

from common.names import is_valid_name
from serving.http import Request
from serving.v1 import HTTPError, parse_query

from .auth import AuthError, AuthQuery, AuthState
from .tls import tls_state

log = logging.getLogger("nsqd")

CACHE_SIZE = 4096  # answers kept, each for one (secret, IP, TLS identity)
DECISIONS_KEPT = 1024  # per answer: (route, query string) -> allowed
PUBLISH, CHANNEL, TOPIC, STATS, CONFIG = "publish", "channel", "topic", "stats", "config"
ROUTE_RULES = {
    "/pub": PUBLISH, "/mpub": PUBLISH, "/topic/create": PUBLISH,
    "/channel/create": CHANNEL, "/channel/delete": CHANNEL, "/channel/empty": CHANNEL,
    "/channel/pause": CHANNEL, "/channel/unpause": CHANNEL, "/channel/max_attempts": CHANNEL,
    "/channel/peek": CHANNEL,
    "/channel/pace": CHANNEL,
    "/topic/delete": TOPIC, "/topic/empty": TOPIC, "/topic/pause": TOPIC, "/topic/unpause": TOPIC,
    "/topic/ttl": TOPIC, "/topic/max_queue_bytes": TOPIC,
    "/stats": STATS, "/metrics": STATS,
}
EVERYTHING = ".*"
CHALLENGE = ("WWW-Authenticate", 'Bearer realm="nsqd"')  # with every 401


class _Query:
    """One question to the auth servers that several requests may wait for."""

    def __init__(self):
        self.done = trio.Event()
        self.state: AuthState | None = None
        self.error: AuthError | None = None


class _Grants:
    """An auth server's answer, and the decisions already taken on it (the same request
    is decided once; topic actions, which depend on the topic's channels, every time)."""

    __slots__ = ("state", "decisions")

    def __init__(self, state: AuthState):
        self.state = state
        self.decisions: dict[tuple[str, str], bool] = {}

    def shows_topic(self, topic: str) -> bool:
        return any(grant.topic.search(topic) for grant in self.state.authorizations)

    def remember(self, key: tuple[str, str], allowed: bool) -> None:
        if len(self.decisions) >= DECISIONS_KEPT:
            self.decisions.clear()
        self.decisions[key] = allowed


class HTTPAuth:
    def __init__(self, nsqd):
        self.nsqd = nsqd
        self._answers: dict[tuple[str, str, str], _Grants] = {}  # (Authorization header, IP, TLS name)
        self._asking: dict[AuthQuery, _Query] = {}

    async def authorize(self, request: Request):
        """Raise HTTPError unless the request's grants allow it. For /stats and /metrics,
        the filter of the topics they may show; otherwise None."""
        rule = ROUTE_RULES.get(request.path)
        if rule is None:
            if not request.path.startswith("/config/"):
                return None  # /ping, /info, or not a route: the API answers 404 or 405
            rule = CONFIG
        grants = await self._grants(request)
        if rule is STATS:
            return grants.shows_topic
        key = (request.path, request.query)
        allowed = grants.decisions.get(key)
        if allowed is None:
            allowed = self._decide(grants.state, rule, request)
            if rule is not TOPIC:
                grants.remember(key, allowed)
        if not allowed:
            raise HTTPError(403, "FORBIDDEN")
        return None

    def _decide(self, state: AuthState, rule: str, request: Request) -> bool:
        if rule is CONFIG:
            return any(_grants_everything(grant) for grant in state.authorizations)
        query = parse_query(request.query)
        topic = _valid_arg(query, "topic")
        if topic is None:
            return True  # the route answers with its own 400
        if rule is PUBLISH:
            return state.allows(topic, "")
        if rule is CHANNEL:
            channel = _valid_arg(query, "channel")
            return channel is None or state.allows(topic, channel)
        existing = self.nsqd.topics.get(topic)
        channels = list(existing.channels) if existing is not None else []
        return state.allows(topic, "") and all(state.allows(topic, channel) for channel in channels)

    async def _grants(self, request: Request) -> _Grants:
        remote_ip = _remote_ip(request.remote_address)
        common_name = tls_state(request.tls).common_name if request.tls is not None else ""
        key = (request.headers.get("authorization", ""), remote_ip, common_name)
        grants = self._answers.get(key)
        if grants is None or grants.state.expired():
            query = AuthQuery(remote_ip, request.tls is not None, _bearer_secret(request), common_name)
            grants = _Grants(await self._ask(query, request))
            self._keep(key, grants)
        if not grants.state.authorizations:
            raise HTTPError(403, "FORBIDDEN")
        return grants

    async def _ask(self, query: AuthQuery, request: Request) -> AuthState:
        asking = self._asking.get(query)
        if asking is None:
            asking = self._asking[query] = _Query()
            try:
                asking.state = await self.nsqd.auth_servers.query(query)
            except AuthError as exc:
                asking.error = exc
            finally:
                del self._asking[query]
                asking.done.set()
        else:
            await asking.done.wait()
        if asking.state is None:
            log.warning("HTTP: [%s] %s %s: AUTH failed %s", request.remote_address, request.method, request.path,
                        asking.error)
            raise HTTPError(401, "AUTH_FAILED")
        return asking.state

    def _keep(self, key: tuple[str, str, str], grants: _Grants) -> None:
        self._answers.pop(key, None)
        self._answers[key] = grants
        if len(self._answers) > CACHE_SIZE:
            del self._answers[next(iter(self._answers))]


def _bearer_secret(request: Request) -> bytes:
    scheme, _, secret = request.headers.get("authorization", "").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise HTTPError(401, "AUTH_REQUIRED")
    return secret.encode("latin-1")


def _remote_ip(remote_address: str) -> str:
    """The IP of ``host:port`` as the TCP side reports it; none for a unix socket."""
    host, colon, _ = remote_address.rpartition(":")
    return host.strip("[]") if colon else ""


def _valid_arg(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values and is_valid_name(values[0]) else None


def _grants_everything(grant) -> bool:
    return (grant.permissions == {"publish", "subscribe"} and grant.topic.pattern == EVERYTHING
            and any(channel.pattern == EVERYTHING for channel in grant.channels))
