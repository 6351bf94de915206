"""nsqlookupd's HTTP API as a Starlette app: NSQ v1.3's routes, parameters and JSON (nsqlookupd/http.go).

V1 conventions come from serving/v1.py. Routing matches NSQ's httprouter where a client
could notice: no implicit HEAD, 404 ``NOT_FOUND`` and 405 ``METHOD_NOT_ALLOWED`` (with
an ``Allow`` header) as V1 errors, ``OPTIONS`` answered with ``Allow``, no redirects.
Every request is logged at INFO, as NSQ's http_api.Log does.
"""

import logging
import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from common import VERSION
from common.goflags import format_duration
from common.names import is_valid_name
from serving.v1 import HTTPError, error_parts, ok_parts, parse_query, text_parts

from .registration_db import channel_registration, keys, subkeys, topic_registration

log = logging.getLogger("nsqlookupd")


def _response(parts, extra_headers: dict[str, str] | None = None) -> Response:
    status, body, headers = parts
    headers = dict(headers)
    if extra_headers:
        headers.update(extra_headers)
    return Response(body, status, headers)


def _ok(data=None) -> Response:
    return _response(ok_parts(data))


def _query(request: Request) -> dict[str, list[str]]:
    return parse_query(request.scope["query_string"].decode("latin-1"))


def _arg(query: dict[str, list[str]], name: str, missing: str) -> str:
    """http_api.ReqParams.Get: the first value; absent is an error, empty is not."""
    values = query.get(name)
    if values is None:
        raise HTTPError(400, missing)
    return values[0]


def _topic_channel_args(query: dict[str, list[str]]) -> tuple[str, str]:
    """http_api.GetTopicChannelArgs."""
    topic = _arg(query, "topic", "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    channel = _arg(query, "channel", "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


class LookupAPI:
    def __init__(self, lookupd):
        self.lookupd = lookupd
        self.db = lookupd.db

    async def ping(self, request: Request) -> Response:
        return _response(text_parts(200, "OK"))

    async def info(self, request: Request) -> Response:
        return _ok({"version": VERSION})

    async def topics(self, request: Request) -> Response:
        return _ok({"topics": keys(self.db.find_registrations("topic", "*", ""))})

    async def channels(self, request: Request) -> Response:
        topic = _arg(_query(request), "topic", "MISSING_ARG_TOPIC")
        return _ok({"channels": subkeys(self.db.find_registrations("channel", topic, "*"))})

    async def lookup(self, request: Request) -> Response:
        db = self.db
        topic = _arg(_query(request), "topic", "MISSING_ARG_TOPIC")
        if not db.find_registrations("topic", topic, ""):
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        channels = subkeys(db.find_registrations("channel", topic, "*"))
        producers = db.filter_active(db.find_producers("topic", topic, ""),
                                     self.lookupd.inactive_producer_timeout_ns, self.lookupd.tombstone_lifetime_ns)
        return _ok({"channels": channels, "producers": [producer.peer_info.public for producer in producers]})

    async def nodes(self, request: Request) -> Response:
        db, lifetime = self.db, self.lookupd.tombstone_lifetime_ns
        now = db.clock()
        # Tombstoned producers are listed (a lifetime of 0 ignores tombstones), flagged per topic.
        nodes = []
        for client in db.filter_active(db.find_producers("client", "", ""), self.lookupd.inactive_producer_timeout_ns, 0):
            peer = client.peer_info
            topics = [k.key for k in db.lookup_registrations(peer.id) if k.category == "topic" and k.subkey == ""]
            tombstones = []
            for topic in topics:
                tombstoned = False
                for producer in db.find_producers("topic", topic, ""):
                    if producer.peer_info is peer:
                        tombstoned = producer.is_tombstoned(lifetime, now)
                tombstones.append(tombstoned)
            nodes.append({**peer.public, "tombstones": tombstones, "topics": topics})
        return _ok({"producers": nodes})

    async def debug(self, request: Request) -> Response:
        data: dict[str, list[dict]] = {}
        for k, producers in self.db.items():
            if not producers:
                continue
            data[f"{k.category}:{k.key}:{k.subkey}"] = [{
                "id": producer.peer_info.id,
                "hostname": producer.peer_info.hostname,
                "broadcast_address": producer.peer_info.broadcast_address,
                "tcp_port": producer.peer_info.tcp_port,
                "http_port": producer.peer_info.http_port,
                "version": producer.peer_info.version,
                "last_update": producer.peer_info.last_update,
                "tombstoned": producer.tombstoned,
                "tombstoned_at": producer.tombstoned_at,
            } for producer in producers.values()]
        return _response(ok_parts(data, sort_keys=True))  # Go marshals maps with their keys sorted

    async def topic_create(self, request: Request) -> Response:
        topic = _arg(_query(request), "topic", "MISSING_ARG_TOPIC")
        if not is_valid_name(topic):
            raise HTTPError(400, "INVALID_ARG_TOPIC")
        log.info("DB: adding topic(%s)", topic)
        self.db.add_registration(topic_registration(topic))
        return _ok()

    async def topic_delete(self, request: Request) -> Response:
        topic = _arg(_query(request), "topic", "MISSING_ARG_TOPIC")
        for k in self.db.find_registrations("channel", topic, "*"):
            log.info("DB: removing channel(%s) from topic(%s)", k.subkey, topic)
            self.db.remove_registration(k)
        for k in self.db.find_registrations("topic", topic, ""):
            log.info("DB: removing topic(%s)", topic)
            self.db.remove_registration(k)
        return _ok()

    async def topic_tombstone(self, request: Request) -> Response:
        query = _query(request)
        topic = _arg(query, "topic", "MISSING_ARG_TOPIC")
        node = _arg(query, "node", "MISSING_ARG_NODE")
        log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
        now = self.db.clock()
        for producer in self.db.find_producers("topic", topic, ""):
            if f"{producer.peer_info.broadcast_address}:{producer.peer_info.http_port}" == node:
                producer.tombstone(now)
        return _ok()

    async def channel_create(self, request: Request) -> Response:
        topic, channel = _topic_channel_args(_query(request))
        log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
        self.db.add_registration(channel_registration(topic, channel))
        log.info("DB: adding topic(%s)", topic)
        self.db.add_registration(topic_registration(topic))
        return _ok()

    async def channel_delete(self, request: Request) -> Response:
        topic, channel = _topic_channel_args(_query(request))
        registrations = self.db.find_registrations("channel", topic, channel)
        if not registrations:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
        for k in registrations:
            self.db.remove_registration(k)
        return _ok()


# -- the app -------------------------------------------------------------------------------


class AccessLog:
    """ASGI middleware: one INFO line per request, ``<status> <method> <uri> (<remote>) <elapsed>``."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_and_note_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note_status)
        finally:
            uri = scope["raw_path"].decode("latin-1")
            if scope["query_string"]:
                uri += "?" + scope["query_string"].decode("latin-1")
            client = scope.get("client")
            remote = (f"[{client[0]}]:{client[1]}" if ":" in client[0] else f"{client[0]}:{client[1]}") if client else ""
            log.info("%d %s %s (%s) %s", status, scope["method"], uri, remote,
                     format_duration(time.perf_counter() - start))


async def _api_error(request: Request, exc: HTTPError) -> Response:
    return _response(error_parts(exc.status, exc.text))


async def _routing_error(request: Request, exc: HTTPException) -> Response:
    """httprouter's answers: NOT_FOUND, METHOD_NOT_ALLOWED with Allow, and OPTIONS."""
    if exc.status_code == 405:
        allow = ", ".join(sorted((exc.headers or {}).get("Allow", "").split(", "))) + ", OPTIONS"
        if request.method == "OPTIONS":
            return Response(b"", 200, {"Allow": allow})
        return _response(error_parts(405, "METHOD_NOT_ALLOWED"), {"Allow": allow})
    if exc.status_code == 404:
        return _response(error_parts(404, "NOT_FOUND"))
    return _response(error_parts(exc.status_code, exc.detail))


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("HTTP: %s %s failed: %r", request.method, request.url.path, exc)
    return _response(error_parts(500, "INTERNAL_ERROR"))


def build_app(lookupd) -> Starlette:
    api = LookupAPI(lookupd)
    table = [
        ("GET", "/ping", api.ping),
        ("GET", "/info", api.info),
        ("GET", "/debug", api.debug),
        ("GET", "/lookup", api.lookup),
        ("GET", "/topics", api.topics),
        ("GET", "/channels", api.channels),
        ("GET", "/nodes", api.nodes),
        ("POST", "/topic/create", api.topic_create),
        ("POST", "/topic/delete", api.topic_delete),
        ("POST", "/channel/create", api.channel_create),
        ("POST", "/channel/delete", api.channel_delete),
        ("POST", "/topic/tombstone", api.topic_tombstone),
    ]
    routes = []
    for method, path, endpoint in table:
        route = Route(path, endpoint, methods=[method])
        route.methods.discard("HEAD")  # Starlette adds HEAD to GET routes; httprouter does not
        routes.append(route)
    app = Starlette(
        routes=routes,
        middleware=[Middleware(AccessLog)],
        exception_handlers={HTTPError: _api_error, HTTPException: _routing_error, Exception: _internal_error},
    )
    app.router.redirect_slashes = False
    return app
