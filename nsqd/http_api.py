"""nsqd's HTTP API: NSQ v1.3's routes, parameters, status codes and bodies (nsqd/http.go).

Conventions (internal/http_api): every V1 answer carries ``X-NSQ-Content-Type: nsq;
version=1.0``; success is the text as is, or JSON for structured data; an error is
``{"message":"<TEXT>"}`` with its status. Parameters come from the query string only.
"""

import gc
import inspect
import json
import logging
import re
import time
from collections.abc import Coroutine

from common import VERSION, lg
from common.errors import ClientError
from common.goflags import FlagError
from common.names import is_valid_name
from common.protocol_v2 import parse_mpub_body
from serving.daemon import option_value
from serving.http import Request, Response
from serving.httprouter import Allowed, Found, MethodNotAllowed, Redirect, Router, redirect_parts
from serving.v1 import BOOL_PARAMS, JSON_TYPE, TEXT_TYPE, V1_HEADER, HTTPError, parse_query, v1_error, v1_ok

from . import metrics, peek, stats
from .dead_letter import parse_limit as parse_max_attempts
from .drain import parse_drain_value
from .group_commit import PublishFailed
from .http_auth import CHALLENGE, HTTPAuth
from .message_ttl import parse_ttl
from .pacing import parse_pace
from .queue_bound import parse_bound
from .slices import in_slices
from .options import FLAGS, LOG_LEVELS, validate_lookupd_address

log = logging.getLogger("nsqd")

GO_INT = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, 64): no spaces, underscores or non-ASCII digits


class HTTPAPI:
    def __init__(self, nsqd):
        self.nsqd = nsqd
        self.routes = {
            ("GET", "/ping"): self.ping,
            ("GET", "/info"): self.info,
            ("POST", "/pub"): self.pub,
            ("POST", "/mpub"): self.mpub,
            ("GET", "/stats"): self.stats,
            ("GET", "/metrics"): self.metrics,
            ("POST", "/topic/create"): self.topic_create,
            ("POST", "/topic/delete"): self.topic_delete,
            ("POST", "/topic/empty"): self.topic_empty,
            ("POST", "/topic/pause"): self.topic_pause,
            ("POST", "/topic/unpause"): self.topic_pause,
            ("POST", "/topic/ttl"): self.topic_ttl,
            ("POST", "/topic/max_queue_bytes"): self.topic_max_queue_bytes,
            ("POST", "/channel/create"): self.channel_create,
            ("POST", "/channel/delete"): self.channel_delete,
            ("POST", "/channel/empty"): self.channel_empty,
            ("POST", "/channel/pause"): self.channel_pause,
            ("POST", "/channel/unpause"): self.channel_pause,
            ("POST", "/channel/max_attempts"): self.channel_max_attempts,
            ("POST", "/channel/pace"): self.channel_pace,
            ("GET", "/config/:opt"): self.config,
            ("PUT", "/config/:opt"): self.config,
            ("POST", "/debug/freememory"): self.free_memory,
        }
        if nsqd.opts.enable_peek:  # beyond NSQ; without the flag the route does not exist (404)
            self.routes[("GET", "/channel/peek")] = self.channel_peek
        self.router = Router(self.routes)
        self.access = HTTPAuth(nsqd) if nsqd.opts.http_auth_required else None

    def body_limit(self, method: str, path: str) -> int:
        """The body bytes nsqd reads before answering 413 (nsqd/http.go): a message's worth
        (--max-msg-size) everywhere but /mpub, which takes --max-body-size."""
        opts = self.nsqd.opts
        return opts.max_body_size if path == "/mpub" else opts.max_msg_size

    async def __call__(self, request: Request) -> Response:
        try:
            shown_topics = await self.access.authorize(request) if self.access is not None else None
            route = self.router.route(request.method, request.path, request.query)
            if not isinstance(route, Found):
                return _unrouted(route, request.method)
            handler = self.routes[(request.method, route.pattern)]
            args = (*route.params.values(),) if shown_topics is None else (*route.params.values(), shown_topics)
            response = handler(request, *args)
            return await response if inspect.isawaitable(response) else response
        except HTTPError as err:
            response = v1_error(err.status, err.text)
            if err.status == 401:
                response.headers.append(CHALLENGE)
            return response
        except Exception:
            log.exception("HTTP: error in %s %s", request.method, request.path)
            return v1_error(500, "INTERNAL_ERROR")

    # -- health and info ------------------------------------------------------------

    def ping(self, request: Request) -> Response:
        health = self.nsqd.health
        status = 200 if self.nsqd.is_healthy() else 500
        return Response(status, health.encode(), [TEXT_TYPE])

    def info(self, request: Request) -> Response:
        opts = self.nsqd.opts
        return v1_ok({
            "version": VERSION,
            "broadcast_address": opts.broadcast_address,
            "hostname": self.nsqd.hostname,
            "http_port": self.nsqd.http_port,
            "tcp_port": self.nsqd.tcp_port,
            "start_time": self.nsqd.start_time,
            "max_heartbeat_interval": round(opts.max_heartbeat_interval * 1e9),
            "max_output_buffer_size": opts.max_output_buffer_size,
            "max_output_buffer_timeout": round(opts.max_output_buffer_timeout * 1e9),
            "max_deflate_level": opts.max_deflate_level,
        } | ({"draining": True} if self.nsqd.draining else {}))

    # -- publishing ------------------------------------------------------------------

    async def _topic_for_publish(self, query: dict[str, list[str]]) -> str:
        """The topic's name; the topic is created if new, and the answer waits for a new
        topic's start, as nsqd's (before the rest of the request is checked, as nsqd does)."""
        if "topic" not in query:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        name = query["topic"][0]
        if not is_valid_name(name):
            raise HTTPError(400, "INVALID_TOPIC")
        try:
            await self.nsqd.get_started_topic(name)
        except PublishFailed:
            raise HTTPError(503, "DRAINING") from None  # beyond NSQ: no new topic (nsqd/drain.py)
        return name

    async def _publish(self, topic: str, bodies: list[bytes], defer: float = 0.0) -> Response:
        """nsqd's publish (NSQD.publish); with --sync-every=1 answered once the disk writes are fsynced."""
        try:
            waiting = self.nsqd.publish(topic, bodies, defer)
            if isinstance(waiting, Coroutine):
                waiting = await waiting
            if waiting is not None:
                await waiting.wait()
        except (PublishFailed, OSError) as exc:
            if self.nsqd.draining:
                raise HTTPError(503, "DRAINING") from None  # beyond NSQ (nsqd/drain.py)
            # nsqd's answer to any failed put, disk errors included; beyond NSQ, QUEUE_FULL (nsqd/queue_bound.py)
            raise HTTPError(503, getattr(exc, "http_text", "EXITING")) from None
        return v1_ok("OK")

    async def pub(self, request: Request) -> Response:
        max_size = self.nsqd.opts.max_msg_size
        if request.body_too_big or len(request.body) > max_size:
            raise HTTPError(413, "MSG_TOO_BIG")
        if not request.body:
            raise HTTPError(400, "MSG_EMPTY")
        query = parse_query(request.query)
        topic = await self._topic_for_publish(query)
        defer = 0.0
        if "defer" in query:
            text = query["defer"][0]
            if not GO_INT.fullmatch(text) or not 0 <= int(text) <= self.nsqd.opts.max_req_timeout * 1000:
                raise HTTPError(400, "INVALID_DEFER")
            defer = int(text) / 1000
        return await self._publish(topic, [request.body], defer)

    async def mpub(self, request: Request) -> Response:
        opts = self.nsqd.opts
        if request.body_too_big or len(request.body) > opts.max_body_size:
            raise HTTPError(413, "BODY_TOO_BIG")
        query = parse_query(request.query)
        topic = await self._topic_for_publish(query)
        binary = False
        if "binary" in query:
            binary = BOOL_PARAMS.get(query["binary"][0], True)
        if binary:
            try:
                bodies = parse_mpub_body(request.body, opts.max_body_size, opts.max_msg_size)
            except ClientError as err:
                raise HTTPError(413, err.code[2:]) from None
        else:
            bodies = [line for line in request.body.split(b"\n") if line]
            if any(len(body) > opts.max_msg_size for body in bodies):
                raise HTTPError(413, "MSG_TOO_BIG")
        return await self._publish(topic, bodies)

    # -- stats -----------------------------------------------------------------------

    async def stats(self, request: Request, shown_topics=None) -> Response:
        """``shown_topics``: with --http-auth-required, which topics the caller may see. Built and
        encoded a topic at a time (nsqd/slices.py), the body the chunks it was built in (nsqd/chunks.py):
        10,000 topics at once held every client."""
        query = parse_query(request.query)

        def first(name: str) -> str:
            return query[name][0] if name in query else ""

        steps = stats.stats_document_steps(self.nsqd, first("topic"), first("channel"),
                                           BOOL_PARAMS.get(first("include_clients"), True),
                                           BOOL_PARAMS.get(first("include_mem"), True), shown_topics)
        if first("format") == "json":
            body = await in_slices(stats.encoded_steps(steps, stats.json_steps))
            return Response(200, body, [V1_HEADER, JSON_TYPE])  # v1_ok's, for a document
        body = await in_slices(stats.encoded_steps(steps, stats.stats_text_steps, time.time()))
        return Response(200, body, [V1_HEADER, TEXT_TYPE])  # v1_ok's, for text (never empty)

    async def metrics(self, request: Request, shown_topics=None) -> Response:
        """Prometheus text exposition (beyond NSQ): plain, without the V1 header."""
        body = await in_slices(metrics.exposition_steps(self.nsqd, shown_topics))
        return Response(200, body, [metrics.CONTENT_TYPE])

    # -- topic and channel administration --------------------------------------------

    def _topic_arg(self, query: dict[str, list[str]], validate: bool) -> str:
        if "topic" not in query:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        name = query["topic"][0]
        if validate and not is_valid_name(name):
            raise HTTPError(400, "INVALID_TOPIC")
        return name

    def _existing_topic(self, name: str):
        topic = self.nsqd.topics.get(name)
        if topic is None:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        return topic

    def _topic_and_channel(self, request: Request):
        """http_api.GetTopicChannelArgs, then the topic must exist."""
        query = parse_query(request.query)
        if "topic" not in query:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        topic_name = query["topic"][0]
        if not is_valid_name(topic_name):
            raise HTTPError(400, "INVALID_ARG_TOPIC")
        if "channel" not in query:
            raise HTTPError(400, "MISSING_ARG_CHANNEL")
        channel_name = query["channel"][0]
        if not is_valid_name(channel_name):
            raise HTTPError(400, "INVALID_ARG_CHANNEL")
        return self._existing_topic(topic_name), channel_name

    def _existing_channel(self, topic, name: str):
        channel = topic.channels.get(name)
        if channel is None:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        return channel

    def free_memory(self, request: Request) -> Response:
        """NSQ's debug.FreeOSMemory: here a full collection, so what only reference cycles held is freed."""
        gc.collect()
        return v1_ok()

    async def topic_create(self, request: Request) -> Response:
        await self._topic_for_publish(parse_query(request.query))
        return v1_ok()

    async def topic_delete(self, request: Request) -> Response:
        name = self._topic_arg(parse_query(request.query), validate=False)
        if not self.nsqd.delete_topic(name):
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        await self.nsqd.removed(name)  # answered once its files are out of the way, as nsqd's is
        return v1_ok()

    def topic_empty(self, request: Request) -> Response:
        topic = self._existing_topic(self._topic_arg(parse_query(request.query), validate=True))
        topic.empty()
        self.nsqd.deferred_store.emptied(topic)
        return v1_ok()

    async def topic_pause(self, request: Request) -> Response:
        topic = self._existing_topic(self._topic_arg(parse_query(request.query), validate=False))
        return await self._set_paused(topic, request)

    async def topic_ttl(self, request: Request) -> Response:
        """Beyond NSQ: ``ttl=<Go duration>`` (``0``: none) or ``ttl=default`` (--msg-ttl's)."""
        query = parse_query(request.query)
        topic = self._existing_topic(self._topic_arg(query, validate=True))
        self.nsqd.message_ttl.set(topic, _setting(query, "ttl", parse_ttl))
        await self.nsqd.write_metadata()
        return v1_ok()

    async def topic_max_queue_bytes(self, request: Request) -> Response:
        """Beyond NSQ: ``max_queue_bytes=<bytes>`` (``0``: none) or ``default`` (--max-queue-bytes')."""
        query = parse_query(request.query)
        topic = self._existing_topic(self._topic_arg(query, validate=True))
        self.nsqd.queue_bounds.set(topic, _setting(query, "max_queue_bytes", parse_bound))
        await self.nsqd.write_metadata()
        return v1_ok()

    async def channel_create(self, request: Request) -> Response:
        topic, channel_name = self._topic_and_channel(request)
        if self.nsqd.removing(topic.name, channel_name):  # deleted a moment ago: once its files are out of the way
            await self.nsqd.removed(topic.name, channel_name)
            topic = self._existing_topic(topic.name)
        if self.nsqd.draining and not self.nsqd.drain.accepts_channel(topic, channel_name):
            raise HTTPError(503, "DRAINING")  # beyond NSQ (nsqd/drain.py)
        topic.get_channel(channel_name)
        return v1_ok()

    async def channel_delete(self, request: Request) -> Response:
        topic, channel_name = self._topic_and_channel(request)
        if not topic.delete_channel(channel_name):
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        await self.nsqd.removed(topic.name, channel_name)  # answered once its files are out of the way
        return v1_ok()

    def channel_empty(self, request: Request) -> Response:
        topic, channel_name = self._topic_and_channel(request)
        channel = self._existing_channel(topic, channel_name)
        channel.empty()
        self.nsqd.deferred_store.emptied(channel)
        return v1_ok()

    async def channel_pause(self, request: Request) -> Response:
        topic, channel_name = self._topic_and_channel(request)
        return await self._set_paused(self._existing_channel(topic, channel_name), request)

    async def channel_max_attempts(self, request: Request) -> Response:
        """Beyond NSQ: ``max_attempts=<0..65535>`` (``0``: none) or ``default`` (--max-attempts')."""
        topic, channel_name = self._topic_and_channel(request)
        channel = self._existing_channel(topic, channel_name)
        limit = _setting(parse_query(request.query), "max_attempts", parse_max_attempts)
        self.nsqd.dead_letters.set(channel, limit)
        await self.nsqd.write_metadata()
        return v1_ok()

    async def channel_peek(self, request: Request) -> Response:
        """Beyond NSQ (--enable-peek): the channel's next ``n`` queued messages, untouched (nsqd/peek.py)."""
        topic, channel_name = self._topic_and_channel(request)
        channel = self._existing_channel(topic, channel_name)
        query = parse_query(request.query)
        count = _setting(query, "n", peek.parse_count) if "n" in query else peek.DEFAULT_COUNT
        max_body = _setting(query, "max_body", peek.parse_max_body) if "max_body" in query else peek.DEFAULT_MAX_BODY
        return Response(200, await peek.peek(channel, count, max_body), [V1_HEADER, JSON_TYPE])

    async def channel_pace(self, request: Request) -> Response:
        """Beyond NSQ: ``rate=<messages a second>`` (``0``: unpaced) or ``default`` (--channel-pace's)."""
        topic, channel_name = self._topic_and_channel(request)
        channel = self._existing_channel(topic, channel_name)
        self.nsqd.pacing.set(channel, _setting(parse_query(request.query), "rate", parse_pace))
        await self.nsqd.write_metadata()
        return v1_ok()

    async def _set_paused(self, target, request: Request) -> Response:
        """Pause or unpause a topic or channel (by the route's name) and save nsqd.dat."""
        if "unpause" in request.path:
            target.unpause()
        else:
            target.pause()
        await self.nsqd.write_metadata()  # before answering, as nsqd does, so a crash keeps the state
        return v1_ok()

    # -- /config/:opt --------------------------------------------------------------------

    def config(self, request: Request, option: str) -> Response:
        opts = self.nsqd.opts
        if request.method == "PUT":
            body = request.body
            if request.body_too_big or not body or len(body) > opts.max_msg_size:
                raise HTTPError(413, "INVALID_VALUE")
            set_option(self.nsqd, option, body)
        if option == "drain":  # beyond NSQ: not an option, the node's state (nsqd/drain.py)
            return v1_ok(self.nsqd.draining)
        value = option_value(FLAGS, opts, option)
        if value is None:
            if option != "nsqlookupd_tcp_addresses":
                raise HTTPError(400, "INVALID_OPTION")
            return Response(200, b"null", [V1_HEADER, JSON_TYPE])  # after a PUT of null, as Go's nil slice
        return v1_ok(value)


def _unrouted(route, method: str) -> Response:
    """httprouter's answers where no route takes the request (serving/httprouter.py)."""
    if isinstance(route, Redirect):
        return Response(*redirect_parts(route, method))
    if isinstance(route, Allowed):
        return Response(200, b"", [("Allow", route.allow)])
    if isinstance(route, MethodNotAllowed):
        response = v1_error(405, "METHOD_NOT_ALLOWED")
        response.headers.append(("Allow", route.allow))
        return response
    return v1_error(404, "NOT_FOUND")


def _setting(query: dict[str, list[str]], name: str, parse):
    """A setting beyond NSQ's from the query string: 400 MISSING_ARG_<NAME> without it,
    INVALID_ARG_<NAME> if ``parse`` raises ValueError."""
    if name not in query:
        raise HTTPError(400, f"MISSING_ARG_{name.upper()}")
    try:
        return parse(query[name][0])
    except ValueError:
        raise HTTPError(400, f"INVALID_ARG_{name.upper()}") from None


def tls_required_handler(nsqd):
    """The plain-HTTP listener's only answer with --tls-required=true (nsqd/http.go ServeHTTP):
    403 and where HTTPS is, written by hand in nsqd, hence the spaces."""
    async def refuse(request: Request) -> Response:
        body = f'{{"message": "TLS_REQUIRED", "https_port": {nsqd.https_port}}}'.encode()
        return Response(403, body, [V1_HEADER, JSON_TYPE])
    return refuse


def set_option(nsqd, option: str, body: bytes) -> None:
    """PUT /config/:opt: the options nsqd lets you change while it runs."""
    if option == "nsqlookupd_tcp_addresses":
        set_lookupd_addresses(nsqd, body)
    elif option == "drain":
        start_drain(nsqd, body)
    elif option == "log_level":
        level = body.decode("utf-8", "replace").lower()  # no trimming: nsqd refuses "debug\n" too
        if level not in LOG_LEVELS:
            raise HTTPError(400, "INVALID_VALUE")
        nsqd.opts.log_level = level
        logging.getLogger("nsqd").setLevel(lg.LEVELS[level])
    else:
        raise HTTPError(400, "INVALID_OPTION")


def start_drain(nsqd, body: bytes) -> None:
    """Beyond NSQ: ``PUT /config/drain`` with ``true`` starts a drain; another while it runs
    changes nothing (as pausing a paused channel), and nothing can stop it."""
    try:
        parse_drain_value(body)
    except ValueError:
        raise HTTPError(400, "INVALID_VALUE") from None
    nsqd.drain.start("PUT /config/drain")


def set_lookupd_addresses(nsqd, body: bytes) -> None:
    """A JSON array of ``host:port``; the lookupd peers are reconciled with it at once."""
    try:
        addresses = json.loads(body)
        if addresses is None:  # Go's json.Unmarshal of null into a slice: none (shown as null)
            nsqd.opts.lookupd_tcp_address = None
            nsqd.lookup.set_addresses([])
            return
        if not isinstance(addresses, list) or not all(isinstance(item, str) for item in addresses):
            raise ValueError("not a list of strings")
        for address in addresses:
            validate_lookupd_address(address)
    except (ValueError, RecursionError, FlagError):
        raise HTTPError(400, "INVALID_VALUE") from None
    nsqd.opts.lookupd_tcp_address = addresses
    nsqd.lookup.set_addresses(addresses)
