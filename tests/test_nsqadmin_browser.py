"""nsqadmin in a real browser: headless Debian Chromium driven by Playwright against a real cluster.

An operator opens the topics page, follows a topic to its channel, sees the live consumer, pauses the
channel from the page and watches deliveries stop (and resume), empties it, deletes it; tombstones a
topic on one nsqd from that node's page; the counter moves; the same works with JavaScript off; a page
on another origin cannot act through the browser.
Every page is saved as a screenshot under artifacts/screenshots/.
"""

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from playwright.sync_api import expect

from .admin_helpers import Cluster, Consumer, cluster, nsqd_stats, topic_on, wait_for  # noqa: F401

pytestmark = pytest.mark.browser


class Publisher:
    """Publishes to a topic over HTTP every ``interval`` seconds, in a thread, until stopped."""

    def __init__(self, http_port: int, topic: str, interval: float = 0.02):
        self.url = f"http://127.0.0.1:{http_port}/pub"
        self.topic = topic
        self.interval = interval
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client() as client:
            while not self._stop.wait(self.interval):
                client.post(self.url, params={"topic": self.topic}, content=b"tick %d" % self.sent)
                self.sent += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def page(chromium, cluster):
    context = chromium.new_context(base_url=cluster.admin.url, viewport={"width": 1360, "height": 860})
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())
    yield tab
    context.close()


def stream(cluster: Cluster, topic: str, channel: str, **identify):
    """A topic on both nsqd, a consumer of ``channel`` on the first, and a producer feeding it."""
    topic_on(cluster, topic, channel)
    consumer = Consumer(cluster.nsqds[0].tcp_port, topic, channel, rdy=100, **identify)
    return consumer, Publisher(cluster.nsqds[0].http_port, topic)


def test_browse_from_topics_to_a_live_client(cluster, page, screenshot):
    consumer, publisher = stream(cluster, "clicks", "analytics", client_id="worker-7", user_agent="go-nsq/1.1.0")
    try:
        wait_for(lambda: consumer.delivered > 5)
        page.goto("/")
        expect(page.locator("h1")).to_have_text("Topics")
        screenshot(page, "topics")
        page.get_by_role("link", name="clicks", exact=True).click()
        expect(page).to_have_url(re.compile(r"/topics/clicks$"))
        expect(page.locator("#topic-channels")).to_contain_text("analytics")
        screenshot(page, "topic")
        page.get_by_role("link", name="analytics", exact=True).click()
        expect(page).to_have_url(re.compile(r"/topics/clicks/analytics$"))
        clients = page.locator("#clients tbody tr")
        expect(clients).to_have_count(1)
        expect(clients.first).to_contain_text("worker-7")
        expect(clients.first).to_contain_text("go-nsq/1.1.0")
        expect(clients.first).to_contain_text("subscribed")
        screenshot(page, "channel")
        page.get_by_role("link", name=cluster.node(0)).first.click()
        expect(page.locator("h1")).to_contain_text(cluster.node(0))
        node_clients = page.get_by_role("table", name="clients of clicks / analytics").locator("tbody tr")
        expect(node_clients).to_have_count(1)
        expect(node_clients.first).to_contain_text("worker-7")
        expect(node_clients.first).to_contain_text("go-nsq/1.1.0")
        screenshot(page, "node")
    finally:
        publisher.stop()
        consumer.close()


def test_pausing_the_channel_stops_deliveries_until_unpaused(cluster, page, screenshot):
    consumer, publisher = stream(cluster, "orders", "billing")
    try:
        wait_for(lambda: consumer.delivered > 10, what="deliveries flowing")
        page.goto("/topics/orders/billing")
        page.get_by_role("button", name="Pause").click()
        expect(page.locator(".banner-ok")).to_have_text("Paused channel billing of topic orders.")
        expect(page.locator("h1 .badge-paused")).to_be_visible()
        screenshot(page, "channel-paused")
        time.sleep(0.3)  # deliberate: what was already on the wire arrives
        delivered, sent = consumer.delivered, publisher.sent
        time.sleep(1.5)  # deliberate: nothing may be delivered while paused
        wait_for(lambda: publisher.sent > sent + 20, what="publishing going on")
        assert consumer.delivered == delivered  # published, not delivered
        page.reload()
        expect(page.locator("#channel-nodes tfoot")).not_to_contain_text("Total 0 ")
        page.get_by_role("button", name="Unpause").click()
        expect(page.locator(".banner-ok")).to_have_text("Unpaused channel billing of topic orders.")
        wait_for(lambda: consumer.delivered > delivered + 20, what="deliveries resumed")
    finally:
        publisher.stop()
        consumer.close()


def test_empty_then_delete_the_channel_from_its_page(cluster, page, screenshot):
    topic_on(cluster, "backlog", "slow", (1500, 1500))
    page.goto("/topics/backlog/slow")
    expect(page.locator("#channel-nodes tfoot td").nth(1)).to_have_text("3,000")
    page.get_by_role("button", name="Empty").click()
    expect(page.locator(".banner-ok")).to_have_text("Emptied channel slow of topic backlog.")
    expect(page.locator("#channel-nodes tfoot td").nth(1)).to_have_text("0")
    assert [nsqd_stats(cluster, n, "backlog")["channels"][0]["depth"] for n in (0, 1)] == [0, 0]
    page.get_by_role("button", name="Delete").click()
    expect(page).to_have_url(re.compile(r"/topics/backlog$"))
    expect(page.locator(".banner-ok")).to_have_text("Deleted channel slow of topic backlog.")
    expect(page.get_by_text("No channels yet")).to_be_visible()
    assert nsqd_stats(cluster, 0, "backlog")["channels"] == []


def test_tombstone_a_topic_from_its_node_page(cluster, page, screenshot):
    """NSQ's node page: a tombstone button on each topic row, for that topic on that nsqd only."""
    topic_on(cluster, "retired", "archive", (4, 6))
    topic_on(cluster, "active", "c", (1, 1))
    node = cluster.node(1)
    page.goto("/nodes")
    http_port = page.get_by_role("cell", name=str(cluster.nsqds[1].http_port), exact=True)
    page.locator("#nodes tbody tr").filter(has=http_port).locator("td.name a").click()
    expect(page.locator("h1")).to_contain_text(node)
    retired = page.locator("#node-topics tbody").filter(has=page.get_by_role("link", name="retired", exact=True))
    expect(retired.locator("tr.group-head")).to_contain_text("6")
    screenshot(page, "node-tombstone")
    retired.get_by_role("button", name="Tombstone").click()
    expect(page.locator(".banner-ok")).to_have_text(f"Tombstoned topic retired on {node}.")
    expect(page).to_have_url(re.compile(r"/nodes/127\.0\.0\.1(:|%3A)\d+$"))
    expect(page.get_by_role("link", name="retired", exact=True)).to_have_count(0)
    expect(page.get_by_role("link", name="active", exact=True)).to_have_count(1)
    screenshot(page, "node-tombstoned")
    assert nsqd_stats(cluster, 1, "retired") is None and nsqd_stats(cluster, 0, "retired")["message_count"] == 4
    producers = httpx.get(f"http://{cluster.lookupd_http}/lookup", params={"topic": "retired"}).json()["producers"]
    assert [producer["http_port"] for producer in producers] == [cluster.nsqds[0].http_port]


def test_a_dismissed_dialog_changes_nothing(cluster, chromium):
    consumer, publisher = stream(cluster, "careful", "c")
    publisher.stop()
    context = chromium.new_context(base_url=cluster.admin.url)
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.dismiss())
    try:
        tab.goto("/topics/careful/c")
        tab.get_by_role("button", name="Delete").click()
        tab.wait_for_timeout(300)
        expect(tab).to_have_url(re.compile(r"/topics/careful/c$"))
        assert nsqd_stats(cluster, 0, "careful")["channels"][0]["channel_name"] == "c"
    finally:
        context.close()
        consumer.close()


def test_the_counter_moves(cluster, page, screenshot):
    consumer, publisher = stream(cluster, "counted", "c")
    try:
        page.goto("/counter")
        total = page.locator("#counter-total")
        first = int(total.inner_text().replace(",", ""))
        expect(page.locator("#counter-rate")).to_contain_text("msgs/s", timeout=10_000)
        wait_for(lambda: int(total.inner_text().replace(",", "")) > first + 20, what="the counter grows")
        screenshot(page, "counter")
    finally:
        publisher.stop()
        consumer.close()


def test_nodes_and_lookup_pages(cluster, page, screenshot):
    httpx.post(f"http://{cluster.lookupd_http}/topic/create", params={"topic": "orphan"})
    httpx.post(f"http://{cluster.lookupd_http}/channel/create", params={"topic": "orphan", "channel": "lonely"})
    page.goto("/nodes")
    expect(page.locator("#nodes tbody tr")).to_have_count(2)
    screenshot(page, "nodes")
    page.goto("/lookup")
    expect(page.locator("#inactive")).to_contain_text("orphan")
    expect(page.locator("#inactive")).to_contain_text("lonely")
    page.fill("input[name=topic]", "created-in-browser")
    page.fill("input[name=channel]", "first")
    page.get_by_role("button", name="Create").click()
    expect(page.locator(".banner-ok")).to_have_text("Created channel first of topic created-in-browser.")
    expect(page.locator("#inactive")).to_contain_text("created-in-browser")
    screenshot(page, "lookup")
    page.goto("/topics/no-such-topic")
    expect(page.locator("h1")).to_have_text("Not found")
    screenshot(page, "not-found")


def test_everything_works_without_javascript(cluster, chromium, screenshot):
    consumer, publisher = stream(cluster, "plain", "html")
    publisher.stop()
    context = chromium.new_context(base_url=cluster.admin.url, java_script_enabled=False,
                                   viewport={"width": 1360, "height": 860})
    tab = context.new_page()
    try:
        tab.goto("/topics/plain/html")
        tab.get_by_role("button", name="Pause").click()
        expect(tab.locator("h1")).to_have_text("Pause channel html of topic plain?")
        screenshot(tab, "confirm")
        tab.get_by_role("button", name="Yes, pause").click()
        expect(tab).to_have_url(re.compile(r"/topics/plain/html$"))
        expect(tab.locator(".banner-ok")).to_have_text("Paused channel html of topic plain.")
        assert nsqd_stats(cluster, 0, "plain")["channels"][0]["paused"] is True
        tab.goto("/counter")
        assert tab.locator("#counter-total").inner_text() != ""
    finally:
        context.close()
        consumer.close()


class AttackSite:
    """Another origin serving pages that try to change the cluster through the visitor's browser."""

    def __init__(self, admin_url: str, node: str):
        pages = {
            "/form-api": f"""<form id=f method=post enctype=text/plain action="{admin_url}/api/topics/target/c">
                <input name='{{"action":"pause","x":"' value='"}}'></form><script>f.submit()</script>""",
            "/form-page": f"""<form id=f method=post action="{admin_url}/topics/target/c">
                <input name=action value=pause><input name=confirm value=yes><input name=csrf value=guess>
                </form><script>f.submit()</script>""",
            "/form-node": f"""<form id=f method=post action="{admin_url}/nodes/{node}">
                <input name=action value=tombstone><input name=topic value=target><input name=confirm value=yes>
                <input name=csrf value=guess></form><script>f.submit()</script>""",
            "/fetch": f"""<script>fetch("{admin_url}/api/topics/target/c", {{method: "POST", mode: "no-cors",
                credentials: "include", body: '{{"action":"pause"}}'}}).finally(() => document.title = "sent");
                fetch("{admin_url}/api/topics/target", {{method: "DELETE", mode: "no-cors"}});
                fetch("{admin_url}/api/nodes/{node}", {{method: "DELETE", mode: "no-cors",
                body: '{{"topic":"target"}}'}});</script>""",
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = f"<!doctype html><title>attack</title>{pages[self.path]}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.url = f"http://127.0.0.2:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_page_on_another_origin_cannot_act(cluster, page):
    consumer, publisher = stream(cluster, "target", "c")
    publisher.stop()
    site = AttackSite(cluster.admin.url, cluster.node(1))
    try:
        page.goto("/topics/target/c")  # the operator has nsqadmin open: its cookies exist
        for attack in ("/form-api", "/form-page", "/form-node", "/fetch"):
            page.goto(site.url + attack)
            page.wait_for_timeout(500)
        assert nsqd_stats(cluster, 0, "target")["channels"][0]["paused"] is False
        assert nsqd_stats(cluster, 1, "target") is not None
        assert "refused cross-site POST /api/topics/target/c" in cluster.admin.log()
        assert f"refused cross-site POST /nodes/{cluster.node(1)}" in cluster.admin.log()
    finally:
        site.close()
        consumer.close()


def test_a_topic_ttl_and_its_expired_counts(cluster, page, screenshot):
    topic_on(cluster, "sensor_readings", "dashboard", counts=(3, 2))
    for nsqd in cluster.nsqds:
        answer = httpx.post(f"http://127.0.0.1:{nsqd.http_port}/topic/ttl",
                            params={"topic": "sensor_readings", "ttl": "300ms"})
        assert answer.status_code == 200, answer.text
    wait_for(lambda: all(nsqd_stats(cluster, n, "sensor_readings")["channels"][0]["depth"] == 0 for n in (0, 1)),
             timeout=5, what="expired messages swept")
    page.goto("/topics/sensor_readings")
    expect(page.locator("#topic-ttl")).to_contain_text("Message TTL 300ms")
    channels = page.locator("#topic-channels")
    expect(channels.locator("thead")).to_contain_text("Expired")
    expect(channels.locator("tbody tr").first).to_contain_text("5")
    screenshot(page, "topic-ttl")
    page.get_by_role("link", name="dashboard", exact=True).click()
    nodes = page.locator("#channel-nodes")
    expect(nodes.locator("thead")).to_contain_text("Expired")
    expect(nodes.locator("tfoot")).to_contain_text("5")
    screenshot(page, "channel-ttl")


def test_dead_letters_are_counted_and_lead_to_their_topic(cluster, page, screenshot):
    topic_on(cluster, "payments", "ledger", counts=(0, 0))
    nsqd = f"http://127.0.0.1:{cluster.nsqds[0].http_port}"
    answer = httpx.post(f"{nsqd}/channel/max_attempts", params={"topic": "payments", "channel": "ledger",
                                                                 "max_attempts": "2"})
    assert answer.status_code == 200, answer.text
    failing = Consumer(cluster.nsqds[0].tcp_port, "payments", "ledger", rdy=10, requeue=True)
    try:
        for n in range(3):
            httpx.post(f"{nsqd}/pub", params={"topic": "payments"}, content=b"charge %d" % n)
        wait_for(lambda: nsqd_stats(cluster, 0, "payments")["channels"][0].get("dead_letter_count") == 3,
                 what="three dead letters")
    finally:
        failing.close()
    page.goto("/topics/payments")
    channels = page.locator("#topic-channels")
    expect(channels.locator("thead")).to_contain_text("Dead Letters")
    screenshot(page, "topic-dead-letters")
    page.get_by_role("link", name="ledger", exact=True).click()
    line = page.locator("#channel-dead-letters")
    expect(line).to_contain_text("delivered 2 times here is not delivered again but moved to topic payments.dead")
    expect(line).to_contain_text("3 so far")
    screenshot(page, "channel-dead-letters")
    line.get_by_role("link", name="payments.dead").click()
    expect(page).to_have_url(re.compile(r"/topics/payments\.dead$"))
    expect(page.locator("#topic-nodes tfoot")).to_contain_text("3")
