"""nsqadmin across implementations, with real processes: our nsqadmin over NSQ v1.3.0's Go daemons,
and NSQ's nsqadmin over ours.

Two clusters for the module, one of Go's daemons and one of ours, each an nsqlookupd and two nsqd,
each in the same state, each with both nsqadmins over it. Three comparisons follow from that: NSQ's
nsqadmin must answer the same over our daemons as over its own; ours must answer the same over Go's
daemons as over ours; and ours must answer as NSQ's does over the same daemons, except where the
README's "Deliberate differences" say otherwise. Actions (create,
pause, unpause, empty, delete, tombstone) go through each nsqadmin's JSON API, and their effect on
the daemons is compared the same way.

NSQ's nsqadmin aggregates in the order its nsqd answer (goroutines), and sorts rows by hostname,
equal here: where a topic lives on both nsqd, only what does not depend on that order is compared.
"""

import html
import json
import re
from pathlib import Path

import httpx
import pytest

from .admin_helpers import E2E_PERCENTILES, AdminProcess, Consumer, Tail
from .go_nsq import GoAdminProcess, GoLookupdProcess, GoNsqdProcess, requires_go
from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess
from .utils_helpers import http, publish, wait_until

pytestmark = requires_go

DAEMONS = {"go": (GoLookupdProcess, GoNsqdProcess), "ours": (LookupdProcess, NsqdProcess)}
ADMINS = {"go": GoAdminProcess, "ours": AdminProcess}


class AdminCluster:
    """nsqlookupd and two nsqd of one implementation (with e2e percentiles), and both nsqadmins over them."""

    def __init__(self, kind: str, data_dir: Path):
        lookupd_class, nsqd_class = DAEMONS[kind]
        self.lookupd = lookupd_class("--broadcast-address=127.0.0.1")
        self.lookupd_http = f"127.0.0.1:{self.lookupd.http_port}"
        self.nsqds = []
        for n in range(2):
            path = data_dir / f"{kind}-nsqd{n}"
            path.mkdir()
            self.nsqds.append(nsqd_class(f"--data-path={path}", "--broadcast-address=127.0.0.1",
                                         f"--lookupd-tcp-address=127.0.0.1:{self.lookupd.tcp_port}", E2E_PERCENTILES))
        # nsqd 0 is the one nsqadmin lists first in both clusters: rows of one hostname go by address
        self.nsqds.sort(key=lambda nsqd: f"127.0.0.1:{nsqd.http_port}")
        self.admins = {admin: ADMINS[admin](f"--lookupd-http-address={self.lookupd_http}") for admin in ADMINS}
        self.consumers: list[Consumer] = []

    def node(self, n: int) -> str:
        """nsqadmin's name of nsqd ``n``: its broadcast address and HTTP port."""
        return f"127.0.0.1:{self.nsqds[n].http_port}"

    def names(self) -> dict[int, str]:
        """What each port of this cluster stands for, the same in both clusters."""
        names = {self.lookupd.http_port: "lookupd-http", self.lookupd.tcp_port: "lookupd-tcp"}
        for n, nsqd in enumerate(self.nsqds):
            names.update({nsqd.http_port: f"nsqd{n}-http", nsqd.tcp_port: f"nsqd{n}-tcp"})
        return names

    def stop(self) -> list[int]:
        for consumer in self.consumers:
            consumer.close()
        return [process.stop() for process in [*self.admins.values(), *self.nsqds, self.lookupd]]


def post(nsqd, path: str) -> None:
    http(nsqd.http_port, path, method="POST")


def registered(cluster: AdminCluster, topic: str, producers: int, channels: int = 0) -> bool:
    answer = httpx.get(f"http://{cluster.lookupd_http}/lookup", params={"topic": topic}, timeout=5)
    return answer.status_code == 200 and len(answer.json()["producers"]) == producers and \
        len(answer.json()["channels"]) >= channels


def fill(cluster: AdminCluster) -> None:
    """The state every read is compared in: ``orders`` on nsqd 0 (a consumer has finished its 3 messages on
    ``billing``; ``audit`` holds them), ``events`` on nsqd 1 (5 messages, channel paused), ``quiet`` on
    nsqd 1 (2 messages, no channel), ``shared`` on both (2 and 4 messages on channel ``s``), and
    ``dormant`` known only to nsqlookupd."""
    first, second = cluster.nsqds
    for path in ("/topic/create?topic=orders", "/channel/create?topic=orders&channel=billing",
                 "/channel/create?topic=orders&channel=audit"):
        post(first, path)
    publish(first.http_port, "orders", b"one", b"two", b"three")
    for path in ("/topic/create?topic=events", "/channel/create?topic=events&channel=c",
                 "/channel/pause?topic=events&channel=c"):
        post(second, path)
    publish(second.http_port, "events", *[b"event %d" % i for i in range(5)])
    publish(second.http_port, "quiet", b"a", b"b")
    for nsqd, count in ((first, 2), (second, 4)):
        post(nsqd, "/topic/create?topic=shared")
        post(nsqd, "/channel/create?topic=shared&channel=s")
        publish(nsqd.http_port, "shared", *[b"s"] * count)
    for path in ("/topic/create?topic=dormant", "/channel/create?topic=dormant&channel=old"):
        http(cluster.lookupd.http_port, path, method="POST")
    consumer = Consumer(first.tcp_port, "orders", "billing", rdy=10, client_id="reader", hostname="reader.example",
                        user_agent="compare/1.0")
    cluster.consumers.append(consumer)
    wait_until(lambda: consumer.delivered == 3, what="the consumer to get its 3 messages")
    for topic, producers, channels in (("orders", 1, 2), ("events", 1, 1), ("quiet", 1, 0), ("shared", 2, 1)):
        wait_until(lambda: registered(cluster, topic, producers, channels), what=f"{topic} registered")
    wait_until(lambda: finished(cluster, first, "orders", "billing") == 3, what="3 messages finished")


def finished(cluster: AdminCluster, nsqd, topic: str, channel: str) -> int:
    stats = json.loads(http(nsqd.http_port, f"/stats?format=json&topic={topic}&channel={channel}"))
    [row] = stats["topics"][0]["channels"]
    return sum(client["finish_count"] for client in row["clients"])


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("admins")
    running = {}
    try:
        for kind in DAEMONS:
            running[kind] = AdminCluster(kind, data_dir)
            fill(running[kind])
        yield running
    finally:
        codes = [code for cluster in running.values() for code in cluster.stop()]
    assert codes == [0] * len(codes)
    for cluster in running.values():
        for ours in (cluster.admins["ours"], cluster.nsqds[0], cluster.lookupd):
            assert "Traceback" not in ours.log(), ours.log()


# -- normalising ------------------------------------------------------------------------------------
# What legitimately differs between two clusters in the same state: ports, when a client connected,
# measured latencies; and the order of rows NSQ's nsqadmin sorts by hostname (all equal here).

ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")
TIMES = ("connect_ts", "connected")
LATENCIES = ("average", "min", "max", "value")


def normal(document, cluster: AdminCluster):
    names = cluster.names()
    text = ADDRESS.sub(lambda match: names.get(int(match.group(1)), "127.0.0.1:<client port>"), json.dumps(document))
    return _normal(json.loads(text), names)


def _normal(value, names: dict[int, str]):
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in TIMES:
                item = "<time>"
            elif key in ("tcp_port", "http_port"):
                item = names.get(item, item)
            elif key in LATENCIES and isinstance(item, int) and item > 0:
                item = "<latency>"
            out[key] = _normal(item, names)
        return out
    if isinstance(value, list):
        items = [_normal(item, names) for item in value]
        if items and all(isinstance(item, dict) for item in items):
            items.sort(key=lambda item: json.dumps(item, sort_keys=True))
        return items
    return value


def answer(cluster: AdminCluster, admin: str, method: str, path: str, body=None) -> tuple:
    """(status, content type, X-NSQ-Content-Type, normalised body) of one nsqadmin; ``body`` is sent as
    it is (bytes) or as JSON."""
    content = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.request(method, cluster.admins[admin].url + path.format(**nodes_of(cluster)), content=content,
                             timeout=10,
                             headers={"Accept-Encoding": "identity"})  # NSQ's drops Content-Type when it gzips
    content_type = response.headers.get("content-type", "")
    document = response.json() if content_type.startswith("application/json") and response.content else response.text
    return response.status_code, content_type, response.headers.get("x-nsq-content-type"), normal(document, cluster)


def nodes_of(cluster: AdminCluster) -> dict[str, str]:
    return {"node0": cluster.node(0), "node1": cluster.node(1)}


READS = ["/ping", "/api/topics", "/api/topics?inactive=true", "/api/topics/orders", "/api/topics/orders/billing",
         "/api/topics/orders/audit", "/api/topics/events", "/api/topics/events/c", "/api/topics/quiet",
         "/api/topics/shared/s", "/api/topics/orders/nosuch", "/api/topics/nosuch", "/api/topics/dormant",
         "/api/nodes", "/api/nodes/{node0}", "/api/nodes/{node1}", "/api/nodes/127.0.0.1:1", "/api/counter",
         "/api/graphite", "/api/graphite?metric=rate", "/api/graphite?metric=rate&target=x",
         "/config/nsqlookupd_http_addresses", "/config/log_level", "/config/nsqd_http_addresses", "/config/admin_users",
         "/config/graphite_url", "/config/base_path", "/config/statsd_interval", "/config/acl_http_header",
         "/config/http_client_tls_insecure_skip_verify", "/config/nosuch", "/api/nothing"]


@pytest.mark.parametrize("path", READS)
def test_nsqs_nsqadmin_reads_our_daemons_as_its_own(clusters, path):
    assert answer(clusters["ours"], "go", "GET", path) == answer(clusters["go"], "go", "GET", path)


BEYOND_NSQ = ["/api/health", "/api/rollups?topic=orders&window=1m", "/api/rollups?topic=orders&channel=billing&window=1h",
              "/api/rollups?window=1m", "/api/tail/orders"]  # routes of ours alone (README "Beyond NSQ")


@pytest.mark.parametrize("path", READS + BEYOND_NSQ)
def test_our_nsqadmin_reads_nsqs_daemons_as_ours(clusters, path):
    assert answer(clusters["go"], "ours", "GET", path) == answer(clusters["ours"], "ours", "GET", path)


# What the README's "Deliberate differences" (### nsqadmin) say ours shows beyond NSQ's: a topic's
# message_bytes and a client's state; and a topic view's channels summed over their nodes, where NSQ's
# shows the first node's row with the other nodes added into it (the same row for a one-node channel).
EXTRA_KEYS = ("message_bytes", "state")


def as_nsq_shows(value):
    if isinstance(value, dict):
        value = {key: as_nsq_shows(item) for key, item in value.items() if key not in EXTRA_KEYS}
        if value.get("node") == "*" and value.get("channels"):
            value["channels"] = [channel["nodes"][0] if len(channel["nodes"]) == 1 else channel
                                 for channel in value["channels"]]
        return value
    if isinstance(value, list):
        return [as_nsq_shows(item) for item in value]
    return value


@pytest.mark.parametrize("path", READS)
def test_our_nsqadmin_answers_as_nsqs_does(clusters, path):
    status, content_type, v1, document = answer(clusters["go"], "ours", "GET", path)
    assert (status, content_type, v1, as_nsq_shows(document)) == answer(clusters["go"], "go", "GET", path)


TOPIC_SUMS = ("node", "hostname", "topic_name", "depth", "memory_depth", "backend_depth", "message_count", "paused",
              "message")
CHANNEL_SUMS = ("topic_name", "channel_name", "depth", "memory_depth", "backend_depth", "in_flight_count",
                "deferred_count", "requeue_count", "timeout_count", "message_count", "client_count")
NODE_TOPIC = ("node", "hostname", "topic_name", "depth", "memory_depth", "backend_depth", "message_count")


def topic_sums(document: dict) -> tuple:
    """What NSQ's topic view of a topic on several nsqd shows whatever order they answered in."""
    return ({key: document[key] for key in TOPIC_SUMS},
            [{key: channel[key] for key in CHANNEL_SUMS} for channel in document["channels"]],
            sorted(({key: row[key] for key in NODE_TOPIC} for row in document["nodes"]), key=lambda row: row["node"]))


def test_a_topic_on_both_nsqd_sums_as_nsqs_does(clusters):
    views = {(daemons, admin): answer(clusters[daemons], admin, "GET", "/api/topics/shared")
             for daemons in DAEMONS for admin in ADMINS}
    assert {view[0] for view in views.values()} == {200}
    sums = {key: topic_sums(view[3]) for key, view in views.items()}
    assert sums[("go", "ours")] == sums[("ours", "go")] == sums[("ours", "ours")] == sums[("go", "go")]
    assert sums[("go", "go")][1][0]["depth"] == 6


# -- actions ----------------------------------------------------------------------------------------

BAD_REQUESTS = [
    ("POST", "/api/topics", b""), ("POST", "/api/topics", b"{nope"), ("POST", "/api/topics", {"topic": "bad topic"}),
    ("POST", "/api/topics", {"topic": ""}), ("POST", "/api/topics", {"topic": "ok", "channel": "bad/channel"}),
    ("POST", "/api/topics", {"topic": 5}), ("POST", "/api/topics", [1]),
    ("POST", "/api/topics/orders", {"action": "explode"}), ("POST", "/api/topics/orders", {}),
    ("POST", "/api/topics/orders", b""), ("POST", "/api/topics/orders", [1]),
    ("POST", "/api/topics/orders/billing", {"action": "explode"}), ("POST", "/api/topics/orders/billing", b"x"),
    ("POST", "/api/topics/nosuch", {"action": "pause"}), ("POST", "/api/topics/nosuch/c", {"action": "pause"}),
    ("DELETE", "/api/topics/nosuch", None), ("DELETE", "/api/topics/nosuch/c", None),
    ("DELETE", "/api/nodes/{node0}", b"nope"), ("DELETE", "/api/nodes/{node0}", {"topic": "a b"}),
    ("DELETE", "/api/nodes/{node0}", {}), ("DELETE", "/api/nodes/{node0}", {"topic": 1}),
    ("PATCH", "/api/topics", None), ("PUT", "/api/nodes", None), ("GET", "/api/topics/a/b/c", None),
    ("PUT", "/config/log_level", b"loud"), ("PUT", "/config/log_level", b""), ("PUT", "/config/base_path", b"/x"),
    ("PUT", "/config/nsqlookupd_http_addresses", b'"127.0.0.1:1"'), ("PUT", "/config/log_level", b"DEBUG"),
    ("PUT", "/config/log_level", b"info"),
]


@pytest.mark.parametrize("method, path, body", BAD_REQUESTS)
def test_refusals_are_nsqs(clusters, method, path, body):
    reference = answer(clusters["go"], "go", method, path, body)
    assert answer(clusters["go"], "ours", method, path, body) == reference
    assert answer(clusters["ours"], "go", method, path, body) == reference


def test_where_ours_refuses_on_purpose(clusters):
    """README, Deliberate differences, ### nsqadmin: a tombstone whose nsqd cannot be reached is a warning
    (the lookupds did tombstone it), and /config takes only a list of host:port lookupd addresses."""
    cluster = clusters["go"]
    tombstone = ("DELETE", "/api/nodes/127.0.0.1:1", {"topic": "orders"})
    status, _, _, nsqs = answer(cluster, "go", *tombstone)
    failure = nsqs["message"].removeprefix("UPSTREAM_ERROR: failed to query any nsqd: ")
    assert (status, failure) == (502, 'Get "http://127.0.0.1:<client port>/info": dial tcp 127.0.0.1:<client port>: '
                                      'connect: connection refused')
    assert answer(cluster, "ours", *tombstone)[::3] == (200, {"message": f"WARNING: {failure}"})
    lookupds = json.dumps([cluster.lookupd_http]).encode()
    for value in (b'["no-port"]', b"null"):
        try:
            assert answer(cluster, "go", "PUT", "/config/nsqlookupd_http_addresses", value)[::3] == \
                (200, json.loads(value))
        finally:
            answer(cluster, "go", "PUT", "/config/nsqlookupd_http_addresses", lookupds)
        assert answer(cluster, "ours", "PUT", "/config/nsqlookupd_http_addresses", value)[::3] == \
            (400, {"message": "INVALID_VALUE"})
    assert answer(cluster, "go", "GET", "/config/nsqlookupd_http_addresses") == \
        answer(cluster, "ours", "GET", "/config/nsqlookupd_http_addresses")


def nsqd_state(cluster: AdminCluster, topic: str) -> list:
    """Each nsqd's ``topic``: None, or (paused, depth, {channel: (paused, depth)})."""
    states = []
    for nsqd in cluster.nsqds:
        found = json.loads(http(nsqd.http_port, f"/stats?format=json&topic={topic}"))["topics"]
        states.append(None if not found else (found[0]["paused"], found[0]["depth"], {
            channel["channel_name"]: (channel["paused"], channel["depth"]) for channel in found[0]["channels"]}))
    return states


def lookupd_state(cluster: AdminCluster, topic: str) -> tuple | None:
    """nsqlookupd's ``topic``: None, or (its channels, the nsqd it lists as producers)."""
    found = httpx.get(f"http://{cluster.lookupd_http}/lookup", params={"topic": topic}, timeout=5)
    if found.status_code == 404:
        return None
    names = {nsqd.http_port: f"nsqd{n}" for n, nsqd in enumerate(cluster.nsqds)}
    return sorted(found.json()["channels"]), sorted(names[p["http_port"]] for p in found.json()["producers"])


C1, C2, BOTH = ("c1",), ("c2",), ("nsqd0", "nsqd1")


def live(paused: bool, depth: int, **channels) -> tuple:
    return paused, depth, channels


# Each step: what is done (an nsqadmin API request, or messages published straight to nsqd n), then what
# each nsqd holds and what nsqlookupd lists, as NSQ's nsqadmin leaves its own daemons.
ACTIONS = [
    (("POST", "/api/topics", {"topic": "{topic}", "channel": "c1"}), [None, None], (["c1"], [])),
    (("publish", 0, 3), [live(False, 0, c1=(False, 3)), None], (["c1"], ["nsqd0"])),
    (("publish", 1, 3), [live(False, 0, c1=(False, 3))] * 2, (["c1"], list(BOTH))),
    (("POST", "/api/topics/{topic}/c1", {"action": "pause"}), [live(False, 0, c1=(True, 3))] * 2, (["c1"], list(BOTH))),
    (("POST", "/api/topics/{topic}/c1", {"action": "unpause"}), [live(False, 0, c1=(False, 3))] * 2,
     (["c1"], list(BOTH))),
    (("POST", "/api/topics/{topic}/c1", {"action": "empty"}), [live(False, 0, c1=(False, 0))] * 2,
     (["c1"], list(BOTH))),
    (("POST", "/api/topics/{topic}", {"action": "pause"}), [live(True, 0, c1=(False, 0))] * 2, (["c1"], list(BOTH))),
    (("publish", 0, 2), [live(True, 2, c1=(False, 0)), live(True, 0, c1=(False, 0))], (["c1"], list(BOTH))),
    (("POST", "/api/topics/{topic}", {"action": "empty"}), [live(True, 0, c1=(False, 0))] * 2, (["c1"], list(BOTH))),
    (("POST", "/api/topics/{topic}", {"action": "unpause"}), [live(False, 0, c1=(False, 0))] * 2,
     (["c1"], list(BOTH))),
    (("POST", "/api/topics", {"topic": "{topic}", "channel": "c2"}),
     [live(False, 0, c1=(False, 0), c2=(False, 0))] * 2, (["c1", "c2"], list(BOTH))),
    (("DELETE", "/api/topics/{topic}/c1", None), [live(False, 0, c2=(False, 0))] * 2, (["c2"], list(BOTH))),
    (("DELETE", "/api/nodes/{node1}", {"topic": "{topic}"}), [live(False, 0, c2=(False, 0)), None],
     (["c2"], ["nsqd0"])),
    (("DELETE", "/api/topics/{topic}", None), [None, None], None),
]


def fill_in(value, topic: str):
    if isinstance(value, str):
        return value.replace("{topic}", topic)
    if isinstance(value, dict):
        return {key: fill_in(item, topic) for key, item in value.items()}
    return value


@pytest.mark.parametrize("admin, daemons", [("go", "go"), ("go", "ours"), ("ours", "go"), ("ours", "ours")])
def test_actions_through_the_api_change_the_daemons_as_nsqs_do(clusters, admin, daemons):
    cluster = clusters[daemons]
    topic = f"acted_by_{admin}"
    for step, (what, nsqds, lookupd) in enumerate(ACTIONS):
        if what[0] == "publish":
            _, n, count = what
            publish(cluster.nsqds[n].http_port, topic, *[b"m"] * count)
            wait_until(lambda: nsqd_state(cluster, topic) == nsqds, what=f"step {step}: {nsqd_state(cluster, topic)}")
        else:
            method, path, body = what
            assert answer(cluster, admin, method, fill_in(path, topic), fill_in(body, topic))[::3] == \
                (200, {"message": ""}), f"step {step}"
            assert nsqd_state(cluster, topic) == nsqds, f"step {step}"  # nsqadmin answers once the nsqd did
        wait_until(lambda: lookupd_state(cluster, topic) == lookupd,
                   what=f"step {step}: nsqlookupd has {lookupd_state(cluster, topic)}")


# -- pages ------------------------------------------------------------------------------------------

PAGES = ["/", "/topics/orders", "/topics/orders/billing", "/topics/events", "/topics/events/c", "/topics/quiet",
         "/topics/shared", "/topics/shared/s", "/topics/dormant", "/nodes", "/nodes/{node0}", "/nodes/{node1}",
         "/counter", "/lookup", "/topics/nosuch", "/topics/orders/nosuch", "/nodes/127.0.0.1:1", "/nosuch"]
DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


def page_text(cluster: AdminCluster, page: str) -> tuple[int, str, list[str]]:
    """(status, content type, the page's visible text line by line, with ports named and durations set
    aside) of one of our nsqadmin's pages."""
    response = httpx.get(cluster.admins["ours"].url + page.format(**nodes_of(cluster)),
                         headers={"Accept": "text/html"}, timeout=10)
    markup = re.sub(r"<script.*?</script>|<style.*?</style>", "", response.text, flags=re.S)
    names = cluster.names()
    lines = []
    for line in html.unescape(re.sub(r"<[^>]+>", "\n", markup)).splitlines():
        line = ADDRESS.sub(lambda match: names.get(int(match.group(1)), "127.0.0.1:<client port>"), line.strip())
        line = re.sub(r"\d{4,5}", lambda match: names.get(int(match.group()), match.group()), line)
        if line:
            lines.append("<duration>" if DURATION.match(line) else line)
    return response.status_code, response.headers["content-type"], lines


@pytest.mark.parametrize("page", PAGES)
def test_our_pages_show_nsqs_daemons_as_ours(clusters, page):
    over_go = page_text(clusters["go"], page)
    assert over_go == page_text(clusters["ours"], page)
    status, content_type, lines = over_go
    assert content_type == "text/html; charset=utf-8"
    assert status == (404 if "nosuch" in page or "127.0.0.1:1" in page else 200)


def test_our_pages_show_what_nsqs_daemons_hold(clusters):
    cluster = clusters["go"]
    topics = page_text(cluster, "/")[2]
    assert {"orders", "events", "quiet", "shared", "dormant"} <= set(topics)
    channel = page_text(cluster, "/topics/orders/billing")[2]
    assert {"reader", "reader.example", "compare/1.0", "nsqd0-http"} <= set(channel)
    nodes = page_text(cluster, "/nodes")[2]
    assert {"nsqd0-tcp", "nsqd1-http", "1.3.0"} <= set(nodes)
    events = page_text(cluster, "/topics/events")[2]
    assert events[events.index("c"):][:3] == ["c", "paused", "5"]
    assert "Unpause" in page_text(cluster, "/topics/events/c")[2]


def test_nsqs_pages_and_assets_answer_over_our_daemons(clusters):
    """NSQ's nsqadmin is a single-page app: every page is the same HTML, which loads its assets and
    then calls the JSON API (the routes the reads above compare)."""
    pages = {}
    for kind, cluster in clusters.items():
        admin = cluster.admins["go"].url
        for page in PAGES[:-1]:
            response = httpx.get(admin + page.format(**nodes_of(cluster)), timeout=10)
            assert (response.status_code, response.headers["content-type"]) == (200, "text/html"), page
            pages.setdefault(kind, set()).add(response.text.replace(str(cluster.lookupd.http_port), "<lookupd>"))
        [index] = pages[kind]
        assets = re.findall(r'(?:href|src)="(/static/[^"]+)"', index)
        assert len(assets) == 5
        for asset in assets:
            assert httpx.get(admin + asset, timeout=10).status_code == 200, asset
    assert pages["ours"] == pages["go"]
    assert 'var NSQLOOKUPD = ["127.0.0.1:<lookupd>",];' in pages["go"].pop()


def test_our_live_tail_reads_nsqs_nsqd(clusters):
    """Beyond NSQ: the live tail subscribes to Go's nsqd as to ours (an ephemeral channel on each nsqd of
    the topic, every message finished), and Go's nsqd drops that channel when the tail closes."""
    cluster = clusters["go"]
    for nsqd in cluster.nsqds:
        post(nsqd, "/topic/create?topic=tailed")
        post(nsqd, "/channel/create?topic=tailed&channel=kept")
    wait_until(lambda: registered(cluster, "tailed", 2, 1), what="tailed registered")
    admin = AdminProcess(f"--lookupd-http-address={cluster.lookupd_http}", "--enable-live-tail")
    try:
        tail = Tail(admin.url, "tailed")
        try:
            channel = tail.ready["channel"]
            assert sorted(tail.ready["nsqd"]) == sorted(nsqd.tcp_address for nsqd in cluster.nsqds)
            for n, nsqd in enumerate(cluster.nsqds):
                http(nsqd.http_port, "/pub?topic=tailed", body=b"tailed from nsqd%d" % n)
            events = sorted(tail.messages(2), key=lambda event: event["body_text"])
            assert [(event["body_text"], event["nsqd"]) for event in events] == \
                [(f"tailed from nsqd{n}", nsqd.tcp_address) for n, nsqd in enumerate(cluster.nsqds)]
        finally:
            tail.close()
        wait_until(lambda: all(channel not in channel_names(nsqd, "tailed") for nsqd in cluster.nsqds),
                   what="Go's nsqd to drop the tail's ephemeral channel")
    finally:
        assert admin.stop() == 0


def channel_names(nsqd, topic: str) -> list[str]:
    stats = json.loads(http(nsqd.http_port, f"/stats?format=json&topic={topic}"))["topics"]
    return [channel["channel_name"] for channel in stats[0]["channels"]] if stats else []
