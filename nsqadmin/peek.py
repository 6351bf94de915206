"""--enable-peek: a channel's next queued messages on its page (nsqd's ``GET /channel/peek``, nsqd/peek.py).

``GET /api/peek/{topic}/{channel}?n=10`` asks every nsqd producing the topic for the next ``n``
(1 to 100) messages queued in its copy of the channel, in delivery order (memory, then disk),
without taking them; an nsqd without the channel is left out, one that does not answer (or runs
without --enable-peek: 404) is named in ``message`` as the JSON API names failures. Bodies are cut
to MAX_BODY bytes by nsqd and sent as UTF-8 text (``body_text``), or as hex (``body_hex``) when they
are not UTF-8; the page renders them as text only (peek.js: textContent), never as HTML.

Bodies can be sensitive: like the live tail, the endpoint answers 404 without the flag, only admin
users (--admin-user), and 403 to requests a browser marks as cross-site.
"""

import base64

from starlette.requests import Request
from starlette.responses import Response

from clusterinfo.cluster import UpstreamFailure
from common.names import is_valid_name
from serving.starlette_v1 import ok, response
from serving.v1 import error_parts

from .guard import is_admin, is_cross_site

MAX_COUNT = 100
DEFAULT_COUNT = 10
MAX_BODY = 1024


def shown_body(body: bytes, truncated: bool) -> dict:
    """``body_text`` if the body is UTF-8 (a character the cut split is dropped), else ``body_hex``."""
    for cut in range(4 if truncated else 1):
        try:
            return {"body_text": body[:len(body) - cut].decode("utf-8")}
        except UnicodeDecodeError:
            continue
    return {"body_hex": body.hex()}


def shown_message(message: dict) -> dict:
    fields = {key: message[key] for key in ("id", "timestamp", "attempts", "size", "truncated", "queue")}
    return {**fields, **shown_body(base64.b64decode(message["body"]), message["truncated"])}


def shown_node(answer: dict) -> dict:
    counts = ("depth", "backend_depth", "in_flight_count", "deferred_count", "paused")
    return {"node": answer["node"], "hostname": answer["hostname"], **{key: answer[key] for key in counts},
            "messages": [shown_message(message) for message in answer["messages"]]}


class Peek:
    """The peek endpoint; 404 unless nsqadmin runs with --enable-peek."""

    def __init__(self, admin):
        self.admin = admin

    async def channel(self, request: Request) -> Response:
        if not self.admin.opts.enable_peek:
            return response(error_parts(404, "NOT_FOUND"))
        if is_cross_site(request) or not is_admin(request, self.admin.opts):
            return response(error_parts(403, "FORBIDDEN"))
        topic, channel = request.path_params["topic"], request.path_params["channel"]
        if not is_valid_name(topic):
            return response(error_parts(400, "INVALID_ARG_TOPIC"))
        if not is_valid_name(channel):
            return response(error_parts(400, "INVALID_ARG_CHANNEL"))
        count = request.query_params.get("n", str(DEFAULT_COUNT))
        if not count.isdigit() or not 1 <= int(count) <= MAX_COUNT:
            return response(error_parts(400, "INVALID_ARG_N"))
        try:
            producers = (await self.admin.ci.topic_producers(topic)).value
        except UpstreamFailure as exc:
            if exc.codes == {"TOPIC_NOT_FOUND"}:
                return response(error_parts(404, "TOPIC_NOT_FOUND"))
            return response(error_parts(502, f"UPSTREAM_ERROR: {exc}"))
        if not producers:
            return response(error_parts(404, "TOPIC_NOT_FOUND"))
        try:
            answer = await self.admin.ci.channel_peek(producers, topic, channel, f"n={int(count)}&max_body={MAX_BODY}")
        except UpstreamFailure as exc:
            return response(error_parts(502, f"UPSTREAM_ERROR: {exc}"))
        nodes = sorted((shown_node(row) for row in answer.value), key=lambda row: (row["hostname"], row["node"]))
        if not nodes and not answer.errors:
            return response(error_parts(404, "CHANNEL_NOT_FOUND"))
        return ok({"nodes": nodes, "max_body": MAX_BODY,
                   "message": "WARNING: " + "\n".join(answer.errors) if answer.errors else ""})
