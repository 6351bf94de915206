"""A channel's page beyond NSQ: peek at its backlog (nsqadmin and nsqd --enable-peek) and how long its
consumers take (nsqd --processing-time-percentile), against a real cluster (nsqlookupd, two nsqd,
nsqadmin processes) through nsqadmin's JSON API and in headless Chromium, with screenshots under
artifacts/screenshots/."""

import httpx
import pytest
from playwright.sync_api import expect

from .admin_helpers import AdminProcess, Cluster, Consumer, nsqd_stats, topic_on, wait_for

MEMORY = 3
PEEK_ARGS = ("--enable-peek", "--processing-time-percentile=0.99,0.5", f"--mem-queue-size={MEMORY}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    running = Cluster(tmp_path_factory.mktemp("cluster"), "--enable-peek", nsqd_args=PEEK_ARGS)
    yield running
    assert running.stop() == [0, 0, 0, 0]


@pytest.fixture
def page(chromium, cluster):
    context = chromium.new_context(base_url=cluster.admin.url, viewport={"width": 1360, "height": 900})
    yield context.new_page()
    context.close()


def pub(cluster: Cluster, n: int, topic: str, body: bytes) -> None:
    answer = httpx.post(f"http://127.0.0.1:{cluster.nsqds[n].http_port}/pub", params={"topic": topic}, content=body)
    assert answer.status_code == 200, answer.text


def api_peek(cluster: Cluster, path: str, **headers) -> httpx.Response:
    return httpx.get(f"{cluster.admin.url}/api/peek/{path}", headers=headers, timeout=10)


# -- peek: the JSON API -------------------------------------------------------------------------


def test_peek_shows_each_nodes_next_messages_untouched(cluster):
    topic_on(cluster, "orders", "billing")
    for n in range(5):
        pub(cluster, 0, "orders", b'{"order": %d}' % n)
    pub(cluster, 1, "orders", b"\xff\xfe binary")
    pub(cluster, 1, "orders", "é".encode() * 600)  # 1,200 bytes: cut within a character at 1 KiB
    answer = api_peek(cluster, "orders/billing?n=4")
    assert answer.status_code == 200, answer.text
    by_node = {node["node"]: node for node in answer.json()["nodes"]}  # sorted by hostname, then address
    first, second = by_node[cluster.node(0)], by_node[cluster.node(1)]
    assert answer.json()["message"] == "" and len(by_node) == 2
    assert (first["node"], first["depth"], first["backend_depth"]) == (cluster.node(0), 5, 2)
    assert [m["body_text"] for m in first["messages"]] == ['{"order": %d}' % n for n in range(4)]
    assert [m["queue"] for m in first["messages"]] == ["memory"] * MEMORY + ["disk"]
    binary, cut = second["messages"]
    assert binary["body_hex"] == b"\xff\xfe binary".hex() and "body_text" not in binary
    assert (cut["body_text"], cut["size"], cut["truncated"]) == ("é" * 512, 1200, True)
    assert nsqd_stats(cluster, 0, "orders")["channels"][0]["depth"] == 5  # nothing taken


@pytest.mark.parametrize("path, status, message", [
    ("orders/billing?n=1000000000", 400, "INVALID_ARG_N"),
    ("orders/billing?n=abc", 400, "INVALID_ARG_N"),
    ("orders/billing?n=0", 400, "INVALID_ARG_N"),
    ("no_such_topic/billing", 404, "TOPIC_NOT_FOUND"),
    ("orders/no_such_channel", 404, "CHANNEL_NOT_FOUND"),
    ("orders/bad!name", 400, "INVALID_ARG_CHANNEL"),
])
def test_bad_peeks_get_nsq_style_errors(cluster, path, status, message):
    topic_on(cluster, "orders", "billing")
    answer = api_peek(cluster, path)
    assert (answer.status_code, answer.json()) == (status, {"message": message})


def test_peek_refuses_cross_site_requests(cluster):
    topic_on(cluster, "orders", "billing")
    answer = api_peek(cluster, "orders/billing", **{"Sec-Fetch-Site": "cross-site"})
    assert (answer.status_code, answer.json()) == (403, {"message": "FORBIDDEN"})


def test_without_nsqadmins_flag_there_is_no_peek(cluster):
    topic_on(cluster, "orders", "billing")
    admin = AdminProcess(f"--lookupd-http-address={cluster.lookupd_http}")
    try:
        answer = httpx.get(f"{admin.url}/api/peek/orders/billing")
        assert (answer.status_code, answer.json()) == (404, {"message": "NOT_FOUND"})
        page = httpx.get(f"{admin.url}/topics/orders/billing").text
        assert 'id="peek"' not in page and "peek.js" not in page
    finally:
        assert admin.stop() == 0


def test_only_admin_users_may_peek(cluster):
    topic_on(cluster, "orders", "billing")
    admin = AdminProcess(f"--lookupd-http-address={cluster.lookupd_http}", "--enable-peek", "--admin-user=alice")
    try:
        stranger = httpx.get(f"{admin.url}/api/peek/orders/billing", headers={"X-Forwarded-User": "mallory"})
        assert (stranger.status_code, stranger.json()) == (403, {"message": "FORBIDDEN"})
        assert 'id="peek"' not in httpx.get(f"{admin.url}/topics/orders/billing").text
        alice = httpx.get(f"{admin.url}/api/peek/orders/billing", headers={"X-Forwarded-User": "alice"})
        assert alice.status_code == 200 and len(alice.json()["nodes"]) == 2
        page = httpx.get(f"{admin.url}/topics/orders/billing", headers={"X-Forwarded-User": "alice"}).text
        assert 'id="peek"' in page and "peek.js" in page
    finally:
        assert admin.stop() == 0


# -- processing time: the JSON API ----------------------------------------------------------------


def test_processing_time_adds_up_over_nodes(cluster):
    topic_on(cluster, "jobs", "workers")
    consumers = [Consumer(nsqd.tcp_port, "jobs", "workers", rdy=10) for nsqd in cluster.nsqds]
    try:
        for n in (0, 1):
            for _ in range(3):
                pub(cluster, n, "jobs", b"job")
        wait_for(lambda: all(nsqd_stats(cluster, n, "jobs")["channels"][0]["processing_time"]["count"] == 3
                             for n in (0, 1)), what="three FINs timed on each nsqd")
    finally:
        for consumer in consumers:
            consumer.close()
    channel = httpx.get(f"{cluster.admin.url}/api/topics/jobs/workers").json()
    timed = channel["processing_time"]
    assert (timed["count"], timed["requeue_count"], timed["timeout_count"]) == (6, 0, 0)
    assert [p["quantile"] for p in timed["percentiles"]] == [0.99, 0.5]
    assert [node["processing_time"]["count"] for node in channel["nodes"]] == [3, 3]


# -- in the browser --------------------------------------------------------------------------------


@pytest.mark.browser
def test_peek_on_the_channel_page_as_text_and_hex(cluster, page, screenshot):
    topic_on(cluster, "signups", "mailer")
    for body in (b'{"email": "ada@example.com", "plan": "pro"}', b"<b>not bold</b><script>alert(1)</script>",
                 b"\x00\x01\x02\xff binary", b"plain text 4", b"plain text 5 " + b"x" * 2000):
        pub(cluster, 0, "signups", body)
    page.goto("/topics/signups/mailer")
    panel = page.locator("#peek")
    expect(panel).to_contain_text("the page reads no message until you peek")
    panel.get_by_role("button", name="Peek").click()
    rows = panel.locator("table.peek-messages tbody tr")
    expect(rows).to_have_count(5)
    expect(rows.nth(0)).to_contain_text('{"email": "ada@example.com", "plan": "pro"}')
    expect(rows.nth(1)).to_contain_text("<b>not bold</b><script>alert(1)</script>")
    assert panel.locator("b, script").count() == 0  # a body is text, never HTML
    expect(rows.nth(2)).to_contain_text("00 01 02 ff 20 62")
    expect(rows.nth(2)).to_contain_text("memory")
    expect(rows.nth(3)).to_contain_text("disk")
    expect(rows.nth(4)).to_contain_text("cut: 2013 B in all")
    expect(panel).to_contain_text("showing 5 of 5 queued (2 on disk), 0 in flight, 0 deferred")
    screenshot(page, "channel-peek")
    panel.get_by_label("bodies as hex").check()
    expect(rows.nth(0)).to_contain_text("7b 22 65 6d 61 69 6c")
    screenshot(page, "channel-peek-hex")
    page.locator("#peek-count").fill("1000")
    panel.get_by_role("button", name="Peek").click()
    expect(page.locator("#peek-status")).to_contain_text("Could not peek: INVALID_ARG_N")
    assert nsqd_stats(cluster, 0, "signups")["channels"][0]["depth"] == 5


@pytest.mark.browser
def test_processing_time_beside_e2e_latency_on_the_channel_page(cluster, page, screenshot):
    topic_on(cluster, "renders", "thumbnails")
    fine = Consumer(cluster.nsqds[0].tcp_port, "renders", "thumbnails", rdy=5)
    failing = Consumer(cluster.nsqds[1].tcp_port, "renders", "thumbnails", rdy=5, requeue=True)
    try:
        for n in range(4):
            pub(cluster, 0, "renders", b"render %d" % n)
        pub(cluster, 1, "renders", b"always fails")
        wait_for(lambda: nsqd_stats(cluster, 0, "renders")["channels"][0]["processing_time"]["count"] == 4 and
                 nsqd_stats(cluster, 1, "renders")["channels"][0]["processing_time"]["requeue_count"] >= 3,
                 what="FINs on one nsqd, REQs on the other")
    finally:
        fine.close()
        failing.close()
    page.goto("/topics/renders/thumbnails")
    table = page.locator("#channel-processing-time")
    expect(table.locator("thead")).to_contain_text("FINs")
    expect(table.locator("thead")).to_contain_text("e2e p99")
    fine_row = table.locator("tbody tr").filter(has_text=cluster.node(0))
    failing_row = table.locator("tbody tr").filter(has_text=cluster.node(1))
    expect(fine_row.locator("td").nth(1)).to_have_text("4")  # FINs
    expect(failing_row.locator("td").nth(1)).to_have_text("0")
    expect(table.locator("tfoot td").nth(1)).to_have_text("4")
    screenshot(page, "channel-processing-time")
