"""nsqadmin's node page lists the clients of each channel, as NSQ v1.3.0's nsqadmin does.

NSQ's node page shows, under each channel of each topic, its clients: host, user agent,
attributes (TLS, snappy, deflate, sample rate, auth identity), in flight, RDY, counts and
connected time. A real cluster with consumers of every kind (NSQ's nsq_tail with TLS,
snappy, deflate, a sample rate and AUTH; a raw consumer whose IDENTIFY is hostile HTML),
on one nsqd of ours (TLS) and one of NSQ's (TLS and AUTH), is shown by NSQ's nsqadmin and
ours: every client NSQ's lists (its ``/api/nodes/:node``, what its page renders) is on our
page with the same details, escaped.
"""

import subprocess
from html.parser import HTMLParser

import httpx
import pytest
from playwright.sync_api import expect

from .admin_helpers import AdminProcess, Consumer, wait_for
from .auth_helpers import EVERYTHING, AuthServer
from .feature_helpers import Certificates
from .go_nsq import GoAdminProcess, GoNsqdProcess, go_program, requires_go
from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess

pytestmark = requires_go

HOSTILE_ID = "<b>id</b>"
HOSTILE_HOST = '"host"<i>.example'
HOSTILE_AGENT = "agent/1.0 <img src=x onerror=alert(1)>"
STATES = {0: "init", 1: "disconnected", 2: "connected", 3: "subscribed", 4: "closing"}


class NodeCluster:
    """nsqlookupd; nsqd "ours" (TLS) and "go" (NSQ's, TLS and AUTH); consumers of every kind on
    topic ``orders``; NSQ's nsqadmin and ours."""

    def __init__(self, data_dir):
        self.certs = Certificates(data_dir)
        self.auth = AuthServer()
        self.auth.answers["good"] = (200, EVERYTHING, 0)
        self.lookupd = LookupdProcess("--broadcast-address=127.0.0.1")
        tls = [f"--tls-cert={self.certs.cert_file}", f"--tls-key={self.certs.key_file}", "--https-address=127.0.0.1:0"]
        auth = f"--auth-http-address={self.auth.address}"
        self.nsqds = {}
        for kind, process, extra in (("ours", NsqdProcess, tls), ("go", GoNsqdProcess, [*tls, auth])):
            (data_dir / kind).mkdir()
            self.nsqds[kind] = process(f"--data-path={data_dir / kind}", "--broadcast-address=127.0.0.1",
                                       f"--lookupd-tcp-address=127.0.0.1:{self.lookupd.tcp_port}", *extra)
        self.tails = [self._tail("ours", "secure", "tls_v1,true", "tls_insecure_skip_verify,true", "snappy,true"),
                      self._tail("ours", "secure", "deflate,true", "deflate_level,3", "client_id,squeezed"),
                      self._tail("go", "audit", "tls_v1,true", "tls_insecure_skip_verify,true", "auth_secret,good",
                                 "deflate,true"),
                      self._tail("go", "audit", "auth_secret,good", "sample_rate,50", "snappy,true")]
        self.raw = Consumer(self.nsqds["ours"].tcp_port, "orders", "raw", rdy=5, client_id=HOSTILE_ID,
                            hostname=HOSTILE_HOST, user_agent=HOSTILE_AGENT, sample_rate=25)
        self.admins = {kind: process(f"--lookupd-http-address=127.0.0.1:{self.lookupd.http_port}")
                       for kind, process in (("ours", AdminProcess), ("go", GoAdminProcess))}
        wait_for(lambda: self.client_counts() == {"ours": 3, "go": 2}, 15, "every consumer connected")

    def _tail(self, kind: str, channel: str, *options: str) -> subprocess.Popen:
        return subprocess.Popen([go_program("nsq_tail"), f"--nsqd-tcp-address={self.nsqds[kind].tcp_address}",
                                 "--topic=orders", f"--channel={channel}",
                                 *(f"--consumer-opt={option}" for option in options)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def node(self, kind: str) -> str:
        return f"127.0.0.1:{self.nsqds[kind].http_port}"

    def client_counts(self) -> dict[str, int]:
        counts = {}
        for kind in self.nsqds:
            stats = httpx.get(f"http://{self.node(kind)}/stats", params={"format": "json"}).json()
            counts[kind] = sum(len(channel["clients"]) for topic in stats["topics"] for channel in topic["channels"])
        return counts

    def stop(self) -> list[int]:
        for tail in self.tails:
            tail.terminate()
            tail.wait(timeout=10)
        self.raw.close()
        statuses = [admin.stop() for admin in self.admins.values()]
        statuses += [nsqd.stop() for nsqd in self.nsqds.values()] + [self.lookupd.stop()]
        self.auth.close()
        return statuses


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    running = NodeCluster(tmp_path_factory.mktemp("node-clients"))
    yield running
    assert running.stop() == [0] * 5


class ClientTables(HTMLParser):
    """The client tables of a page, by their label: rows of cell texts (entities decoded; the
    texts of a cell's elements joined by a space)."""

    def __init__(self, page: str):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._rows: list[list[str]] | None = None
        self._row: list[str] = []
        self._cell: list[str] | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs) -> None:
        attributes = dict(attrs)
        if tag == "table" and "clients" in (attributes.get("class") or "").split():
            self._rows = self.tables.setdefault(attributes.get("aria-label", ""), [])
        elif self._rows is not None and tag == "td":
            self._cell = []

    def handle_endtag(self, tag) -> None:
        if self._rows is None:
            return
        if tag == "td":
            self._row.append(" ".join(" ".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row:
            self._rows.append(self._row)
            self._row = []
        elif tag == "table":
            self._rows = None

    def handle_data(self, data) -> None:
        if self._cell is not None:
            self._cell.append(data)


def expected_row(client: dict) -> list[str]:
    """What our page's row shows of a client that NSQ's nsqadmin lists (its JSON): identity, user
    agent and protocol, address, state, RDY, and last the features' badges in the page's order."""
    identity = client["client_id"]
    if client["hostname"] != client["client_id"]:
        identity += f" {client['hostname']}"
    features = []
    if client["tls"]:
        features.append(client["tls_version"] or "TLS")
    features += [name for name in ("snappy", "deflate") if client[name]]
    if client["sample_rate"]:
        features.append(f"sample {client['sample_rate']}%")
    if client["authed"]:
        features.append(f"auth: {client['auth_identity']}" if client["auth_identity"] else "auth")
    return [identity, f"{client['user_agent']} protocol {client['version']}", client["remote_address"],
            STATES[3], str(client["ready_count"]), " ".join(features) or "–"]


@pytest.mark.parametrize("kind", ["ours", "go"])
def test_every_client_nsq_lists_is_on_the_node_page_with_its_details(cluster, kind):
    node = cluster.node(kind)
    shown_by_nsq = httpx.get(f"{cluster.admins['go'].url}/api/nodes/{node}").json()
    page = httpx.get(f"{cluster.admins['ours'].url}/nodes/{node}")
    assert page.status_code == 200
    tables = ClientTables(page.text).tables
    listed = 0
    for topic in shown_by_nsq["topics"]:
        for channel in topic["channels"]:
            rows = tables.get(f"clients of {topic['topic_name']} / {channel['channel_name']}", [])
            shown = sorted([row[:5] + row[-1:] for row in rows], key=lambda row: row[2])
            assert shown == sorted([expected_row(client) for client in channel["clients"]], key=lambda row: row[2])
            listed += len(rows)
    assert listed == {"ours": 3, "go": 2}[kind]


def test_what_consumers_sent_is_escaped_on_the_node_page(cluster):
    page = httpx.get(f"{cluster.admins['ours'].url}/nodes/{cluster.node('ours')}").text
    for raw in (HOSTILE_ID, HOSTILE_HOST, HOSTILE_AGENT):
        assert raw not in page
    assert "&lt;b&gt;id&lt;/b&gt;" in page and "&#34;host&#34;&lt;i&gt;.example" in page
    assert "agent/1.0 &lt;img src=x onerror=alert(1)&gt;" in page
    [row] = ClientTables(page).tables["clients of orders / raw"]
    assert (row[0], row[-1]) == (f"{HOSTILE_ID} {HOSTILE_HOST}", "sample 25%")


@pytest.mark.browser
@pytest.mark.parametrize("kind", ["ours", "go"])
def test_the_node_page_in_a_browser(cluster, chromium, screenshot, kind):
    context = chromium.new_context(base_url=cluster.admins["ours"].url, viewport={"width": 1360, "height": 860})
    page = context.new_page()
    try:
        page.goto(f"/nodes/{cluster.node(kind)}")
        expect(page.locator("table.clients")).to_have_count({"ours": 2, "go": 1}[kind])
        if kind == "ours":
            expect(page.get_by_role("table", name="clients of orders / raw")).to_contain_text(HOSTILE_ID)
            expect(page.get_by_role("table", name="clients of orders / secure")).to_contain_text("TLS1.")
        else:
            expect(page.get_by_role("table", name="clients of orders / audit")).to_contain_text("auth: alice")
        screenshot(page, f"node-clients-{kind}-nsqd")
    finally:
        context.close()
