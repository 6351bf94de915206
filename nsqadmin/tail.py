"""--enable-live-tail: a topic's messages, as they flow, streamed to a browser with server-sent events.

Theory of operation: each GET of ``/api/tail/{topic}`` subscribes with nsqclient to the
topic on a channel of its own, ``nsqadmin_tail_<random>#ephemeral``, on every nsqd that produces
the topic (found as the topic page finds them) and has a channel of it already: where a topic has
no channel, nsqd keeps its messages for the first one, and a tail must not take them (409
TOPIC_HAS_NO_CHANNELS when no nsqd has one). Every message received is finished at once, so
the tail never holds messages back from nsqd. At most ``RATE`` messages a second (a token
bucket of ``RATE`` tokens) become ``message`` events; the rest are dropped and counted, and the
count goes out in every event and in a ``dropped`` event when it grows. A body is cut to
``MAX_BODY`` bytes and sent as UTF-8 text, or as hex when it is not UTF-8. The browser renders
it as text, never as HTML (tail.js).

When the browser goes away (the page closed, the EventSource closed) the consumer stops and its
connections close; nsqd then deletes the ephemeral channel, as it does when an ephemeral
channel's last client leaves. With the flag off the endpoint answers 404; like the actions, it
answers only admin users (--admin-user) and refuses requests a browser marks as cross-site (403).
"""

import json
import logging
import secrets
import time

import anyio
from starlette.requests import Request
from starlette.responses import Response

from clusterinfo.cluster import UpstreamFailure
from clusterinfo.producers import http_address, tcp_address
from nsqclient import Consumer, Message, NSQError
from serving.logs import nsq_logger
from serving.v1 import error_parts
from serving.starlette_v1 import response

from .guard import is_admin, is_cross_site

log = logging.getLogger("nsqadmin")

MAX_BODY = 4096
RATE = 20
MAX_IN_FLIGHT = 100
TICK_SECONDS = 1.0
STOP_SECONDS = 2.0
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def tail_channel() -> str:
    return f"nsqadmin_tail_{secrets.token_hex(4)}#ephemeral"


def message_event(message: Message, dropped: int) -> dict:
    """What the browser is told of one message: its header, and its body cut to MAX_BODY bytes."""
    body = bytes(message.body)
    shown = body[:MAX_BODY]
    event = {"id": bytes(message.id).decode("ascii", "replace"), "timestamp": message.timestamp,
             "attempts": message.attempts, "nsqd": message.nsqd_address, "size": len(body),
             "truncated": len(body) > MAX_BODY, "dropped": dropped}
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        event["body_hex"] = shown.hex()
    else:
        event["body_text"] = shown.decode("utf-8", "ignore")  # "ignore" drops only a character the cut split
    return event


def sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class RateLimit:
    """A token bucket: ``rate`` events a second, bursts of up to ``rate``."""

    def __init__(self, rate: float):
        self.rate = rate
        self.tokens = rate
        self.last = time.monotonic()

    def allow(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class TailStream(Response):
    """The event stream of one browser: a consumer feeding it until the browser disconnects."""

    media_type = "text/event-stream"

    def __init__(self, topic: str, nsqds: list[str], auth_secret: str):
        super().__init__(headers=SSE_HEADERS, media_type=self.media_type)
        del self.headers["content-length"]  # a stream of unknown length: chunked
        self.topic = topic
        self.nsqds = nsqds
        self.channel = tail_channel()
        self.limit = RateLimit(RATE)
        self.dropped = 0
        self.send_events, self.events = anyio.create_memory_object_stream[bytes](MAX_IN_FLIGHT)
        self.consumer = Consumer(topic, self.channel, self._handle, nsqd_tcp_addresses=nsqds,
                                 max_in_flight=MAX_IN_FLIGHT, stop_timeout=STOP_SECONDS,
                                 auth_secret=auth_secret)

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        log.info("TAIL: %s on channel %s of %s", self.topic, self.channel, ", ".join(self.nsqds))
        async with anyio.create_task_group() as group:
            group.start_soon(self._until_disconnect, receive, group.cancel_scope)
            await group.start(self.consumer.run)
            group.start_soon(self._tick)
            await self.send_events.send(sse("ready", {"topic": self.topic, "channel": self.channel,
                                                     "nsqd": self.nsqds, "max_body": MAX_BODY, "rate": RATE}))
            async for chunk in self.events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        log.info("TAIL: closed channel %s of %s", self.channel, self.topic)

    async def _handle(self, message: Message) -> None:
        """Every message is finished (by returning); what is past the rate or the buffer is dropped."""
        if not self.limit.allow():
            self.dropped += 1
            return
        try:
            self.send_events.send_nowait(sse("message", message_event(message, self.dropped)))
        except anyio.WouldBlock:
            self.dropped += 1

    async def _tick(self) -> None:
        """Once a second: the drop count if it grew, else a comment that keeps proxies from timing out."""
        told = 0
        while True:
            await anyio.sleep(TICK_SECONDS)
            if self.dropped != told:
                told = self.dropped
                await self.send_events.send(sse("dropped", {"dropped": told}))
            else:
                await self.send_events.send(b": idle\n\n")

    async def _until_disconnect(self, receive, scope: anyio.CancelScope) -> None:
        """When the browser goes: stop the consumer (CLS, then close once nothing is in flight), end the stream."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self.consumer.stop()
        with anyio.move_on_after(STOP_SECONDS):
            await self.consumer.wait_stopped()
        scope.cancel()


class LiveTail:
    """The tail endpoint; 404 unless nsqadmin runs with --enable-live-tail."""

    def __init__(self, admin):
        self.admin = admin
        if admin.opts.enable_live_tail:  # nsqclient's lines in nsqadmin's format; its routine ones only in debug
            nsq_logger("nsqclient", "warn" if admin.opts.log_level == "info" else admin.opts.log_level,
                     admin.opts.log_prefix)

    async def stream(self, request: Request) -> Response:
        if not self.admin.opts.enable_live_tail:
            return response(error_parts(404, "NOT_FOUND"))
        if is_cross_site(request):
            return response(error_parts(403, "FORBIDDEN"))
        if not is_admin(request, self.admin.opts):
            return response(error_parts(403, "FORBIDDEN"))
        topic = request.path_params["topic"]
        try:
            nsqds = await self._tailable_nsqds(topic)
        except UpstreamFailure as exc:
            if exc.codes == {"TOPIC_NOT_FOUND"}:
                return response(error_parts(404, "TOPIC_NOT_FOUND"))
            return response(error_parts(502, str(exc)))
        if not nsqds:
            return response(error_parts(409, "TOPIC_HAS_NO_CHANNELS"))
        try:
            return TailStream(topic, nsqds, self.admin.opts.nsqd_auth_secret)
        except NSQError as exc:
            return response(error_parts(400, str(exc)))

    async def _tailable_nsqds(self, topic: str) -> list[str]:
        """TCP addresses of the producers whose copy of ``topic`` has a channel already.

        On an nsqd where the topic has none, the topic holds its messages for the first channel
        to come: a tail channel there would take them from it, so that nsqd is left out.
        """
        producers = (await self.admin.ci.topic_producers(topic)).value
        rows = (await self.admin.ci.nsqd_stats(producers, topic, include_clients=False)).value
        with_channels = {row["node"] for row in rows if row["channels"]}
        return sorted(tcp_address(p) for p in producers if http_address(p) in with_channels)
