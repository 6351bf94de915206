"""nsqadmin's web pages: server-rendered Jinja2, usable without JavaScript.

Each page shows a view of views.py, the same data the JSON API returns. Daemons that did
not answer are named in a banner above whatever the others said; if none answered the
page says so with a 502.

Actions are forms POSTed to the page's own URL. Without JavaScript, the first POST
answers with a confirmation page, whose button POSTs again with ``confirm=yes``;
nsqadmin.js asks with a dialog instead and sends ``confirm=yes`` itself. After the
action the browser is sent back (303) to a page that shows the cluster as it now is,
with the outcome in a one-time message (a short-lived cookie), so reloading never
repeats an action. Every form carries the CSRF token of guard.py; only admins see and
may use the forms.
"""

import asyncio
import base64
import json
import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import jinja2
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from clusterinfo.cluster import TOPIC_ACTIONS, UpstreamFailure
from clusterinfo.producers import http_address
from clusterinfo.upstream import UpstreamError
from common import VERSION
from common.goflags import format_duration
from common.names import is_valid_name

from . import views
from .history import panels
from .history.access import HistoryUnavailable
from .history.windows import ALL_NODES
from .guard import CSRF_COOKIE, CSRF_FIELD, csrf_token_matches, is_admin, new_csrf_token
from .humanize import FILTERS, path_segment

log = logging.getLogger("nsqadmin")

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
FLASH_COOKIE = "nsqadmin_flash"
MAX_FORM_BYTES = 64 * 1024
MAX_PACE = 1_000_000_000  # the largest pace nsqd takes (nsqd/pacing.py)
MAX_FLASH_BYTES = 3000
DONE = {"pause": "Paused", "unpause": "Unpaused", "empty": "Emptied", "delete": "Deleted"}


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(FILTERS)
    return env


def _encode_flash(flash: dict) -> str:
    data = json.dumps(flash).encode()
    while len(data) > MAX_FLASH_BYTES and flash["details"]:
        flash["details"].pop()
        data = json.dumps(flash).encode()
    return base64.urlsafe_b64encode(data).decode()


def _decode_flash(value: str) -> dict | None:
    try:
        flash = json.loads(base64.urlsafe_b64decode(value.encode()))
        return {"kind": str(flash["kind"]), "text": str(flash["text"]), "details": [str(d) for d in flash["details"]]}
    except (ValueError, KeyError, TypeError):
        return None


def _outcome(text: str, errors: list[str]) -> dict:
    if errors:
        return {"kind": "warn", "text": text + " Some daemons did not do it:", "details": errors}
    return {"kind": "ok", "text": text, "details": []}


class Pages:
    def __init__(self, admin):
        self.admin = admin
        self.ci = admin.ci
        self.operator = admin.operator
        self.templates = Jinja2Templates(env=_environment())
        self.history = admin.history

    @property
    def opts(self):
        return self.admin.opts

    def url(self, path: str = "/") -> str:
        base = self.opts.base_path.rstrip("/")
        return base + path if path != "/" or base else "/"

    # -- rendering ----------------------------------------------------------------------

    def _render(self, request: Request, template: str, status: int = 200, **context) -> Response:
        csrf = request.cookies.get(CSRF_COOKIE) or new_csrf_token()
        flash = _decode_flash(request.cookies.get(FLASH_COOKIE, ""))
        context.setdefault("warnings", [])
        context.setdefault("error", "")
        page = self.templates.TemplateResponse(request, template, {
            "base": self.url(""), "version": VERSION, "is_admin": is_admin(request, self.opts),
            "csrf": csrf, "flash": flash, "lookupds": self.opts.lookupd_http_address,
            "nsqds": self.opts.nsqd_http_address, "http_address": http_address,
            "confirmation": confirmation, "tombstone_confirmation": tombstone_confirmation,
            "drain_confirmation": drain_confirmation, "pace_confirmation": pace_confirmation, **context},
            status_code=status)
        cookie_path = self.opts.base_path
        if request.cookies.get(CSRF_COOKIE) != csrf:
            page.set_cookie(CSRF_COOKIE, csrf, path=cookie_path, httponly=True, samesite="strict")
        if FLASH_COOKIE in request.cookies:
            page.delete_cookie(FLASH_COOKIE, path=cookie_path, samesite="strict")
        page.headers["Cache-Control"] = "no-store"
        return page

    def _failure(self, request: Request, exc: UpstreamFailure, page: str) -> Response:
        if exc.codes == {"TOPIC_NOT_FOUND"}:
            return self.not_found(request, "No nsqlookupd knows this topic.")
        log.error("%s", exc)
        return self._render(request, "error.html", 502, page=page, title="The cluster did not answer",
                            detail="No nsqlookupd or nsqd answered nsqadmin's requests:", error=str(exc),
                            hint="Check that the addresses nsqadmin was given are up and reachable from this host.")

    def not_found(self, request: Request, what: str = "") -> Response:
        return self._render(request, "error.html", 404, page="", title="Not found",
                            detail=what or f"Nothing here: {request.url.path}",
                            hint="Pick a topic or a node from the lists above.")

    def _bad_request(self, request: Request, detail: str) -> Response:
        return self._render(request, "error.html", 400, page="", title="Bad request", detail=detail,
                            hint="Use the buttons of nsqadmin's pages.")

    def _redirect(self, path: str, outcome: dict) -> Response:
        page = RedirectResponse(self.url(path), status_code=303)
        page.set_cookie(FLASH_COOKIE, _encode_flash(outcome), path=self.opts.base_path, max_age=60,
                        httponly=True, samesite="strict")
        return page

    # -- history ------------------------------------------------------------------------

    def _no_history_note(self) -> str:
        if not self.opts.stats_interval:
            return "Recording is off: nsqadmin was started with --stats-interval=0."
        when = (f"rolls them up every {format_duration(self.opts.rollup_interval)}" if self.opts.rollup_interval
                else "rolls them up when nsqadmin-rollup runs (--rollup-interval=0)")
        return (f"No history for this range yet: nsqadmin records the cluster every "
                f"{format_duration(self.opts.stats_interval)} and {when}.")

    async def _read_history(self, read):
        """``read(reader)``, or None when there is no history to read."""
        try:
            return await self.history.read(read)
        except HistoryUnavailable:
            return None

    async def _panel(self, request: Request, read, charts=panels.QUEUE_CHARTS) -> panels.Panel:
        """The history section: ``read(reader, window, since)`` over the range the page asks for."""
        range_name = panels.chosen_range(request.query_params.get("range"))
        now = time.time()
        since = datetime.fromtimestamp(panels.since_for(range_name, now), timezone.utc)
        try:
            rows = await self.history.read(lambda reader: read(reader, panels.RANGES[range_name][1], since))
        except HistoryUnavailable as exc:
            return panels.panel([], range_name, now, str(exc), charts)
        return panels.panel(rows, range_name, now, self._no_history_note(), charts)

    async def _current(self) -> dict[tuple[str, str], dict]:
        """The newest 1-minute window of every (topic, channel) across nodes."""
        now = datetime.now(timezone.utc)
        return await self._read_history(lambda reader: reader.current(now)) or {}

    async def _health(self) -> dict[str, list[dict]]:
        """The last rollup's channel health, per topic, most urgent first."""
        health = await self._read_history(lambda reader: reader.health()) or {}
        by_topic: dict[str, list[dict]] = {}
        for entry in health.get("channels") or []:
            by_topic.setdefault(entry["topic"], []).append(entry)
        return {topic: panels.worst_first(entries) for topic, entries in by_topic.items()}

    # -- pages --------------------------------------------------------------------------

    async def topics(self, request: Request) -> Response:
        try:
            shown = await views.overview(self.ci)
        except UpstreamFailure as exc:
            return self._failure(request, exc, "topics")
        current, health = await asyncio.gather(self._current(), self._health())
        return self._render(request, "topics.html", page="topics", warnings=shown.errors, current=current,
                            health=health, **shown.data)

    async def topic(self, request: Request) -> Response:
        name = request.path_params["topic"]
        try:
            shown = await views.topic(self.ci, name)
        except UpstreamFailure as exc:
            return self._failure(request, exc, "topics")
        current, health = await asyncio.gather(self._current(), self._health())
        history = await self._panel(request, lambda reader, window, since: reader.topic_series(window, name, since))
        return self._render(request, "topic.html", page="topics", warnings=shown.errors, topic_name=name,
                            topic=shown.data, current=current, health={e["channel"]: e for e in health.get(name, [])},
                            history=history, live_tail=self.opts.enable_live_tail and is_admin(request, self.opts))

    async def channel(self, request: Request) -> Response:
        topic_name, channel_name = request.path_params["topic"], request.path_params["channel"]
        try:
            shown = await views.channel(self.ci, topic_name, channel_name)
        except UpstreamFailure as exc:
            return self._failure(request, exc, "topics")
        status = 200 if shown.data is not None else 404
        health = await self._health()
        history = await self._panel(request, lambda reader, window, since: reader.series(
            window, topic_name, channel_name, ALL_NODES, since))
        channel_health = next((e for e in health.get(topic_name, []) if e["channel"] == channel_name), None)
        return self._render(request, "channel.html", status, page="topics", warnings=shown.errors,
                            topic_name=topic_name, channel_name=channel_name, channel=shown.data,
                            producers_found=shown.producers_found, history=history, channel_health=channel_health,
                            peek=self.opts.enable_peek and is_admin(request, self.opts))

    async def nodes(self, request: Request) -> Response:
        try:
            shown = await views.producers(self.ci)
        except UpstreamFailure as exc:
            return self._failure(request, exc, "nodes")
        return self._render(request, "nodes.html", page="nodes", warnings=shown.errors, producers=shown.data)

    async def node(self, request: Request) -> Response:
        address = request.path_params["node"]
        try:
            shown = await views.node(self.ci, address)
        except views.NodeNotFound:
            return self.not_found(request, f"No nsqd at {address} is known to the cluster.")
        except UpstreamFailure as exc:
            return self._failure(request, exc, "nodes")
        history = await self._panel(request, lambda reader, window, since: reader.node_series(window, address, since))
        return self._render(request, "node.html", page="nodes", warnings=shown.errors, history=history, **shown.data)

    async def counter(self, request: Request) -> Response:
        try:
            shown = await views.counter(self.ci)
        except UpstreamFailure as exc:
            return self._failure(request, exc, "counter")
        total = sum(entry["message_count"] for entry in shown.data.values())
        history = await self._panel(request, lambda reader, window, since: reader.cluster_series(window, since),
                                    panels.COUNTER_CHARTS)
        return self._render(request, "counter.html", page="counter", warnings=shown.errors, total=total,
                            channels=len(shown.data), history=history)

    async def lookup(self, request: Request) -> Response:
        try:
            shown = await views.inactive_topics(self.ci)
        except UpstreamFailure as exc:
            return self._failure(request, exc, "lookup")
        return self._render(request, "lookup.html", page="lookup", warnings=shown.errors,
                            inactive=sorted(shown.data.items()))

    async def graphite_proxy(self, request: Request) -> Response:
        """--proxy-graphite: ``<base>/render`` passed to graphite, with the URL's basic auth."""
        target = urlsplit(self.opts.graphite_url)
        auth = (target.username or "", target.password or "") if target.username else None
        url = target._replace(netloc=target.hostname + (f":{target.port}" if target.port else "")).geturl()
        try:
            answer = await self.admin.upstream.request("GET", f"{url.rstrip('/')}/render",
                                                       params=request.query_params, auth=auth)
        except UpstreamError as exc:
            log.error("graphite proxy failed - %s", exc)
            return Response(b"Bad Gateway", 502)
        return Response(answer.content, answer.status_code,
                        {"Content-Type": answer.headers.get("content-type", "application/octet-stream")})

    # -- forms --------------------------------------------------------------------------

    async def _form(self, request: Request) -> dict[str, str] | Response:
        """The fields of one of our forms, or the page refusing it."""
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            return self._render(request, "error.html", 413, page="", title="Form too large", detail="",
                                hint="Submit the form from nsqadmin's own page.")
        fields = {key: values[0] for key, values in parse_qs(body.decode("utf-8", "replace")).items()}
        if not csrf_token_matches(request, fields.get(CSRF_FIELD, "")):
            return self._render(request, "error.html", 403, page="", title="This form has expired",
                                detail="The form did not come from this nsqadmin page, or its session changed.",
                                hint="Go back, reload the page and try again.")
        if not is_admin(request, self.opts):
            return self._render(request, "error.html", 403, page="", title="Not allowed",
                                detail="Only nsqadmin's admin users may change the cluster.",
                                hint=f"nsqadmin reads your identity from the {self.opts.acl_http_header} header.")
        return fields

    def _confirm(self, request: Request, fields: dict, question: str, consequence: str,
                 page: str = "topics") -> Response:
        return self._render(request, "confirm.html", page=page, question=question, consequence=consequence,
                            action_url=request.url.path, fields={k: v for k, v in fields.items() if k != CSRF_FIELD})

    async def topic_form(self, request: Request) -> Response:
        topic = request.path_params["topic"]
        fields = await self._form(request)
        if isinstance(fields, Response):
            return fields
        action = fields.get("action", "")
        if action == "tombstone":
            return await self._tombstone(request, fields, topic, fields.get("node", ""),
                                         f"/topics/{path_segment(topic)}", "topics")
        if action not in (*TOPIC_ACTIONS, "delete"):
            return self._bad_request(request, f"Unknown action {action!r}.")
        if fields.get("confirm") != "yes":
            return self._confirm(request, fields, *confirmation(action, topic))
        back = f"/topics/{path_segment(topic)}"
        try:
            if action == "delete":
                errors = await self.operator.delete(request, topic)
                back = "/lookup" if fields.get("from") == "lookup" else "/topics"
            else:
                errors = await self.operator.act(request, action, topic)
        except UpstreamFailure as exc:
            return self._redirect(back, {"kind": "error", "text": f"Could not {action} topic {topic}.",
                                         "details": [str(exc)]})
        return self._redirect(back, _outcome(f"{DONE[action]} topic {topic}.", errors))

    async def _tombstone(self, request: Request, fields: dict, topic: str, node: str, back: str,
                         page: str) -> Response:
        """Tombstone ``topic`` on ``node`` (what NSQ's DELETE /api/nodes/:node does), then back to ``back``."""
        if fields.get("confirm") != "yes":
            return self._confirm(request, fields, *tombstone_confirmation(topic, node), page=page)
        errors = await self.operator.tombstone(request, topic, node)
        return self._redirect(back, _outcome(f"Tombstoned topic {topic} on {node}.", errors))

    async def node_form(self, request: Request) -> Response:
        """The node page's per-topic Tombstone button (NSQ's node page has one on each topic row),
        and its Drain button (beyond NSQ: nsqd/drain.py)."""
        node = request.path_params["node"]
        fields = await self._form(request)
        if isinstance(fields, Response):
            return fields
        if fields.get("action") == "drain":
            return await self._drain(request, fields, node)
        if fields.get("action") != "tombstone":
            return self._bad_request(request, f"Unknown action {fields.get('action', '')!r}.")
        topic = fields.get("topic", "")
        if not is_valid_name(topic):
            return self._bad_request(request, f"{topic!r} is not a valid topic name.")
        return await self._tombstone(request, fields, topic, node, f"/nodes/{path_segment(node)}", "nodes")

    async def _drain(self, request: Request, fields: dict, node: str) -> Response:
        if fields.get("confirm") != "yes":
            return self._confirm(request, fields, *drain_confirmation(node), page="nodes")
        back = f"/nodes/{path_segment(node)}"
        try:
            await views.known_node(self.ci, node)
            errors = await self.operator.drain(request, node)
        except views.NodeNotFound:
            return self.not_found(request, f"No nsqd at {node} is known to the cluster.")
        except UpstreamFailure as exc:
            return self._redirect(back, {"kind": "error", "text": f"Could not drain {node}.", "details": [str(exc)]})
        return self._redirect(back, _outcome(f"Draining {node}.", errors))

    async def channel_form(self, request: Request) -> Response:
        topic, channel = request.path_params["topic"], request.path_params["channel"]
        fields = await self._form(request)
        if isinstance(fields, Response):
            return fields
        action = fields.get("action", "")
        if action == "pace":
            return await self._pace(request, fields, topic, channel)
        if action not in (*TOPIC_ACTIONS, "delete"):
            return self._bad_request(request, f"Unknown action {action!r}.")
        if fields.get("confirm") != "yes":
            return self._confirm(request, fields, *confirmation(action, topic, channel))
        here = f"/topics/{path_segment(topic)}/{path_segment(channel)}"
        try:
            if action == "delete":
                errors = await self.operator.delete(request, topic, channel)
                here = "/lookup" if fields.get("from") == "lookup" else f"/topics/{path_segment(topic)}"
            else:
                errors = await self.operator.act(request, action, topic, channel)
        except UpstreamFailure as exc:
            return self._redirect(here, {"kind": "error", "text": f"Could not {action} channel {channel}.",
                                         "details": [str(exc)]})
        return self._redirect(here, _outcome(f"{DONE[action]} channel {channel} of topic {topic}.", errors))

    async def _pace(self, request: Request, fields: dict, topic: str, channel: str) -> Response:
        """Beyond NSQ: the channel's pace on every nsqd that has its topic (POST /channel/pace)."""
        rate = fields.get("rate", "").strip()
        if not rate.isascii() or not rate.isdigit() or int(rate) > MAX_PACE:
            return self._bad_request(request, f"Pace {rate!r} is not a whole number of messages a second "
                                              f"from 0 to {MAX_PACE}.")
        if fields.get("confirm") != "yes":
            return self._confirm(request, fields, *pace_confirmation(topic, channel, int(rate)))
        here = f"/topics/{path_segment(topic)}/{path_segment(channel)}"
        try:
            errors = await self.operator.pace(request, topic, channel, int(rate))
        except UpstreamFailure as exc:
            return self._redirect(here, {"kind": "error", "text": f"Could not pace channel {channel}.",
                                         "details": [str(exc)]})
        done = f"Paced channel {channel} of topic {topic} at {int(rate):,} messages a second." if int(rate) else \
            f"Lifted the pace of channel {channel} of topic {topic}."
        return self._redirect(here, _outcome(done, errors))

    async def lookup_form(self, request: Request) -> Response:
        fields = await self._form(request)
        if isinstance(fields, Response):
            return fields
        topic, channel = fields.get("topic", "").strip(), fields.get("channel", "").strip()
        if not is_valid_name(topic) or (channel and not is_valid_name(channel)):
            bad = topic if not is_valid_name(topic) else channel
            return self._redirect("/lookup", {"kind": "error", "text": f"{bad!r} is not a valid name.", "details": [
                "Names are 1 to 64 characters of letters, digits, '.', '_' and '-', optionally ending in #ephemeral."]})
        try:
            errors = await self.operator.create(request, topic, channel)
        except (UpstreamFailure, UpstreamError) as exc:
            return self._redirect("/lookup", {"kind": "error", "text": f"Could not create {topic}.",
                                              "details": [str(exc)]})
        created = f"channel {channel} of topic {topic}" if channel else f"topic {topic}"
        return self._redirect("/lookup", _outcome(f"Created {created}.", errors))


def confirmation(action: str, topic: str, channel: str = "") -> tuple[str, str]:
    """(question, consequence) an operator answers before ``action`` on a topic or channel: the
    same words in the dialog (nsqadmin.js) and on the confirmation page."""
    what = f"channel {channel}" if channel else f"topic {topic}"
    question = f"{action.capitalize()} channel {channel} of topic {topic}?" if channel else \
        f"{action.capitalize()} topic {topic}?"
    return question, {
        "pause": f"Every nsqd will stop delivering messages of {what}; they queue up until it is unpaused."
                 if channel else f"Every nsqd will stop passing messages of {what} to its channels; "
                                 f"they queue up in the topic until it is unpaused.",
        "unpause": f"Every nsqd will resume delivering messages of {what}.",
        "empty": f"Every message queued in {what} (in memory and on disk) will be dropped on every nsqd. "
                 f"This cannot be undone.",
        "delete": f"{what.capitalize()} will be deleted on every nsqd and nsqlookupd, with every message it holds. "
                  f"This cannot be undone.",
    }[action]


def pace_confirmation(topic: str, channel: str, rate: int | None = None) -> tuple[str, str]:
    """(question, consequence) before pacing a channel (the dialog's, before the rate is typed, says "the pace")."""
    pace = "the pace" if rate is None else f"{rate:,}"
    return (f"Pace channel {channel} of topic {topic}?",
            f"Every nsqd will deliver at most {pace} messages a second of channel {channel}, across all of its "
            f"consumers; the rest wait in the channel. 0 lifts the pace." if rate != 0 else
            f"Every nsqd will deliver messages of channel {channel} as fast as its consumers take them.")


def tombstone_confirmation(topic: str, node: str) -> tuple[str, str]:
    """(question, consequence) before tombstoning ``topic`` on ``node``, in the dialog and on the page."""
    return (f"Tombstone topic {topic} on {node}?",
            f"nsqlookupd will stop listing {node} as a producer of {topic} for a while, "
            f"and {node} will delete the topic with every message it holds.")


def drain_confirmation(node: str) -> tuple[str, str]:
    """(question, consequence) before draining ``node`` (beyond NSQ: nsqd/drain.py)."""
    return (f"Drain {node}?",
            f"{node} will refuse every new message, topic and channel, leave nsqlookupd's listings, deliver "
            f"every message it holds to its consumers, then exit. A drain cannot be cancelled.")
