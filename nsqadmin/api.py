"""nsqadmin's JSON API: NSQ v1.3's routes, bodies, status codes and keys (nsqadmin/http.go).

Every success carries ``"message"``: ``""``, or ``"WARNING: ..."`` naming the daemons that
failed while others answered; when none answered, 502 ``UPSTREAM_ERROR: <why>``. Changes
need an admin (403 ``FORBIDDEN``, guard.py) and take a JSON body decoded as Go's
json.Decoder does (a bad body is a 400 with the decoder's complaint). Lists NSQ leaves
nil when empty come back as ``null``, and maps with their keys sorted, as Go writes them.
"""

import json
import logging
from datetime import datetime, timezone

from starlette.requests import Request
from starlette.responses import Response

from clusterinfo.cluster import TOPIC_ACTIONS, UpstreamFailure, escape
from clusterinfo.upstream import UpstreamError
from common import gojson, lg
from common.names import is_valid_name
from serving.daemon import option_value
from serving.starlette_v1 import arg, ok, query
from serving.v1 import HTTPError

from . import views
from .guard import config_allowed, is_admin
from .history.access import HistoryOff, HistoryUnreadable
from .history.windows import ALL_NODES, WINDOWS
from .options import FLAGS, LOG_LEVELS, check_http_address

log = logging.getLogger("nsqadmin")

MAX_CONFIG_BODY = 1024 * 1024


def _sorted_map(mapping: dict) -> dict:
    """A Go map as json.Marshal writes it: keys in order."""
    return {key: mapping[key] for key in sorted(mapping)}


_GO_SYNTAX_ERRORS = {
    "Expecting value": "invalid character {!r} looking for beginning of value",
    "Expecting property name enclosed in double quotes": "invalid character {!r} looking for beginning of object key string",
    "Expecting ':' delimiter": "invalid character {!r} after object key",
    "Expecting ',' delimiter": "invalid character {!r} after object key:value pair",
}
_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "bool"}


def _json_error_text(text: str, exc: json.JSONDecodeError) -> str:
    """The complaint of Go's json.Decoder for the usual mistakes."""
    rest = text[exc.pos:]
    if not rest or exc.msg.startswith("Unterminated"):
        return "unexpected EOF"
    template = _GO_SYNTAX_ERRORS.get(exc.msg)
    return template.format(rest[0]) if template else f"invalid JSON: {exc.msg} at offset {exc.pos}"


def decode_body(body: bytes, fields: dict[str, type]) -> dict:
    """The first JSON value of ``body`` into a struct of ``fields`` (json.NewDecoder(r).Decode)."""
    text = body.decode("utf-8", "surrogateescape").lstrip(" \t\r\n")
    if not text:
        raise ValueError("EOF")
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        raise ValueError(_json_error_text(text, exc)) from None
    if value is not None and not isinstance(value, dict):
        kind = _JSON_KINDS[type(value)]
        raise ValueError(f"json: cannot unmarshal {kind} into Go value of type {gojson.struct_type(fields)}")
    return gojson.decode_struct(text[:end].encode("utf-8", "surrogateescape"), fields)


def _no_producers() -> HTTPError:
    """NSQ asks zero nsqd for the stats of a topic nobody produces, which "fails" them all."""
    return HTTPError(502, "UPSTREAM_ERROR: failed to query any nsqd: ")


def _upstream_error(exc: UpstreamFailure) -> HTTPError:
    log.error("%s", exc)
    return HTTPError(502, f"UPSTREAM_ERROR: {exc}")


class AdminAPI:
    def __init__(self, admin):
        self.admin = admin
        self.ci = admin.ci
        self.operator = admin.operator
        self.history = admin.history

    @property
    def opts(self):
        return self.admin.opts

    async def _shown(self, view, *args) -> views.Shown:
        try:
            shown = await view(self.ci, *args)
        except UpstreamFailure as exc:
            raise _upstream_error(exc) from exc
        if shown.warnings:
            log.warning("%s", shown.message)
        return shown

    def _require_admin(self, request: Request) -> None:
        if not is_admin(request, self.opts):
            raise HTTPError(403, "FORBIDDEN")

    async def _change(self, change, *args) -> Response:
        """Run an Operator change; its partial failures become the answer's WARNING."""
        try:
            errors = await change(*args)
        except UpstreamFailure as exc:
            raise _upstream_error(exc) from exc
        shown = views.Shown(None, [errors] if errors else [])
        if errors:
            log.warning("%s", shown.message)
        return ok({"message": shown.message})

    # -- reading ------------------------------------------------------------------------

    async def topics(self, request: Request) -> Response:
        inactive = query(request).get("inactive", [""])[0] == "true"
        shown = await self._shown(views.inactive_topics if inactive else views.topic_names)
        topics = _sorted_map(shown.data) if inactive else shown.data or None
        return ok({"topics": topics, "message": shown.message})

    async def topic(self, request: Request) -> Response:
        shown = await self._shown(views.topic, request.path_params["topic"])
        if shown.data is None:
            raise _no_producers()
        return ok({**shown.data, "message": shown.message})

    async def channel(self, request: Request) -> Response:
        shown = await self._shown(views.channel, request.path_params["topic"], request.path_params["channel"])
        if not shown.producers_found:
            raise _no_producers()
        # A channel no nsqd has: NSQ embeds a nil *ChannelStats, leaving only the message.
        return ok({**(shown.data or {}), "message": shown.message})

    async def nodes(self, request: Request) -> Response:
        shown = await self._shown(views.producers)
        return ok({"nodes": shown.data or None, "message": shown.message})

    async def node(self, request: Request) -> Response:
        try:
            shown = await self._shown(views.node, request.path_params["node"])
        except views.NodeNotFound:
            raise HTTPError(404, "NODE_NOT_FOUND") from None
        data = shown.data
        return ok({"node": data["node"], "topics": data["topics"] or None, "total_messages": data["total_messages"],
                   "total_clients": data["total_clients"], "message": shown.message}
                  | ({"draining": True, "drain_messages_left": data["drain_messages_left"]} if data["draining"] else {}))

    async def counter(self, request: Request) -> Response:
        shown = await self._shown(views.counter)
        return ok({"stats": _sorted_map(shown.data), "message": shown.message})

    async def graphite(self, request: Request) -> Response:
        values = query(request)
        if values.get("metric", [""])[0] != "rate":
            raise HTTPError(400, "INVALID_ARG_METRIC")
        target = arg(values, "target", "INVALID_ARG_TARGET")
        interval = int(self.opts.statsd_interval)
        url = (f"{self.opts.graphite_url}/render?format=json&from=-{2 * interval}sec"
               f"&target={escape(target)}&until=-{interval}sec")
        log.info("GRAPHITE: %s", url)
        try:
            series = await self.admin.upstream.get_v1(url)
            first = series[0]["datapoints"][0][0]
        except (UpstreamError, LookupError, TypeError) as exc:
            log.error("graphite request failed - %s", exc)
            raise HTTPError(500, "INTERNAL_ERROR") from None
        rate = "N/A" if first is None or first < 0 else f"{first / interval:.2f}"
        return ok({"rate": rate})

    # -- stats history ------------------------------------------------------------------

    async def _history(self, read):
        """``read(reader)``; 503 ``HISTORY_OFF: <why>`` with the history off, 500 if it cannot be read."""
        try:
            return await self.history.read(read)
        except HistoryOff:
            raise HTTPError(503, f"HISTORY_OFF: {self.history.off}") from None
        except HistoryUnreadable:
            raise HTTPError(500, "INTERNAL_ERROR") from None

    async def rollups(self, request: Request) -> Response:
        """Windows of a topic or channel, on one node or summed across nodes, oldest first."""
        values = query(request)
        topic = arg(values, "topic", "MISSING_ARG_TOPIC")
        if not is_valid_name(topic):
            raise HTTPError(400, "INVALID_ARG_TOPIC")
        channel = values.get("channel", [""])[0]
        if channel and not is_valid_name(channel):
            raise HTTPError(400, "INVALID_ARG_CHANNEL")
        window = values.get("window", ["1m"])[0]
        if window not in WINDOWS:
            raise HTTPError(400, "INVALID_ARG_WINDOW")
        since = None
        if "since" in values:
            raw = values["since"][0]
            if not raw.isdigit():
                raise HTTPError(400, "INVALID_ARG_SINCE")
            since = datetime.fromtimestamp(min(int(raw), 253402300799), timezone.utc)
        node = values.get("node", [""])[0] or ALL_NODES
        series = await self._history(lambda reader: reader.series(window, topic, channel, node, since))
        return ok({"window": window, "series": series})

    async def health(self, request: Request) -> Response:
        """Every channel's status and reason from the last rollup run."""
        found = await self._history(lambda reader: reader.health()) or {}
        return ok({"generated": found.get("generated"), "channels": found.get("channels") or []})

    # -- changing -----------------------------------------------------------------------

    async def create_topic_channel(self, request: Request) -> Response:
        self._require_admin(request)
        try:
            body = decode_body(await request.body(), {"topic": str, "channel": str})
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from None
        topic, channel = body.get("topic", ""), body.get("channel", "")
        if not is_valid_name(topic):
            raise HTTPError(400, "INVALID_TOPIC")
        if channel and not is_valid_name(channel):
            raise HTTPError(400, "INVALID_CHANNEL")
        return await self._change(self.operator.create, request, topic, channel)

    async def _action(self, request: Request, channel: str = "") -> Response:
        self._require_admin(request)
        try:
            action = decode_body(await request.body(), {"action": str}).get("action", "")
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from None
        if action not in TOPIC_ACTIONS:
            raise HTTPError(400, "INVALID_ACTION")
        return await self._change(self.operator.act, request, action, request.path_params["topic"], channel)

    async def topic_action(self, request: Request) -> Response:
        return await self._action(request)

    async def channel_action(self, request: Request) -> Response:
        return await self._action(request, request.path_params["channel"])

    async def delete_topic(self, request: Request) -> Response:
        self._require_admin(request)
        return await self._change(self.operator.delete, request, request.path_params["topic"])

    async def delete_channel(self, request: Request) -> Response:
        self._require_admin(request)
        params = request.path_params
        return await self._change(self.operator.delete, request, params["topic"], params["channel"])

    async def node_action(self, request: Request) -> Response:
        """Beyond NSQ: ``{"action": "drain"}`` starts draining the node (nsqd/drain.py)."""
        self._require_admin(request)
        try:
            action = decode_body(await request.body(), {"action": str}).get("action", "")
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from None
        if action != "drain":
            raise HTTPError(400, "INVALID_ACTION")
        node = request.path_params["node"]
        try:
            await views.known_node(self.ci, node)
        except views.NodeNotFound:
            raise HTTPError(404, "NODE_NOT_FOUND") from None
        except UpstreamFailure as exc:
            raise _upstream_error(exc) from exc
        return await self._change(self.operator.drain, request, node)

    async def tombstone_node_for_topic(self, request: Request) -> Response:
        self._require_admin(request)
        try:
            topic = decode_body(await request.body(), {"topic": str}).get("topic", "")
        except ValueError:
            raise HTTPError(400, "INVALID_BODY") from None
        if not is_valid_name(topic):
            raise HTTPError(400, "INVALID_TOPIC")
        return await self._change(self.operator.tombstone, request, topic, request.path_params["node"])

    # -- /config/:opt -------------------------------------------------------------------

    async def config(self, request: Request) -> Response:
        allowed = config_allowed(request, self.admin.config_network)
        if allowed is None:
            raise HTTPError(400, "INVALID_REMOTE_ADDR")
        if not allowed:
            raise HTTPError(403, "FORBIDDEN")
        option = request.path_params["opt"]
        if request.method == "PUT":
            body = await request.body()
            if not body or len(body) > MAX_CONFIG_BODY:
                raise HTTPError(413, "INVALID_VALUE")
            self._set_option(option, body)
        value = option_value(FLAGS, self.opts, option)
        if value is None:
            raise HTTPError(400, "INVALID_OPTION")
        return ok(value)

    def _set_option(self, option: str, body: bytes) -> None:
        if option == "nsqlookupd_http_addresses":
            try:
                addresses = json.loads(body)
                if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
                    raise ValueError("not a list of strings")
                for address in addresses:
                    check_http_address(address, "nsqlookupd_http_addresses")
            except ValueError:
                raise HTTPError(400, "INVALID_VALUE") from None
            self.opts.lookupd_http_address = addresses
        elif option == "log_level":
            level = body.decode("utf-8", "replace").lower()
            if level not in LOG_LEVELS:
                raise HTTPError(400, "INVALID_VALUE")
            self.opts.log_level = level
            log.setLevel(lg.LEVELS[level])
        else:
            raise HTTPError(400, "INVALID_OPTION")
