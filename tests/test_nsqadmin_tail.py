"""--enable-live-tail against a real cluster: nsqlookupd, two nsqd and nsqadmin processes, read with a
streaming HTTP client (server-sent events) and, once, in headless Chromium.

Off by default (404, no panel); on, published messages arrive as JSON events with their bodies
intact (text) or in hex, cut to 4 KiB, at most 20 a second with the rest counted as dropped; when
the reader goes away the ephemeral channel disappears from nsqd.
"""

import time

import httpx
import pytest
from playwright.sync_api import expect

from .admin_helpers import Cluster, Tail, nsqd_stats, topic_on, wait_for

MAX_BODY = 4096


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A cluster whose nsqadmin runs with --enable-live-tail."""
    running = Cluster(tmp_path_factory.mktemp("cluster"), "--enable-live-tail")
    yield running
    assert running.stop() == [0, 0, 0, 0]


def pub(cluster: Cluster, n: int, topic: str, body: bytes) -> None:
    answer = httpx.post(f"http://127.0.0.1:{cluster.nsqds[n].http_port}/pub", params={"topic": topic}, content=body)
    assert answer.status_code == 200, answer.text


def channels_on(cluster: Cluster, n: int, topic: str) -> list[str]:
    stats = nsqd_stats(cluster, n, topic)
    return [c["channel_name"] for c in stats["channels"]] if stats else []


def test_off_by_default_the_endpoint_is_404_and_the_page_has_no_panel(cluster):
    topic_on(cluster, "tail_off", counts=(0,))
    admin = cluster.start_admin()
    try:
        answer = httpx.get(f"{admin.url}/api/tail/tail_off")
        assert answer.status_code == 404
        assert answer.json() == {"message": "NOT_FOUND"}
        page = httpx.get(f"{admin.url}/topics/tail_off")
        assert page.status_code == 200, admin.log()
        assert 'id="live-tail"' not in page.text and "tail.js" not in page.text
    finally:
        assert admin.stop() == 0
    assert 'id="live-tail"' in httpx.get(f"{cluster.admin.url}/topics/tail_off").text


def test_unknown_topic_and_cross_site_requests_are_refused(cluster):
    assert httpx.get(f"{cluster.admin.url}/api/tail/no_such_topic").status_code == 404
    topic_on(cluster, "tail_guarded", counts=(0,))
    answer = httpx.get(f"{cluster.admin.url}/api/tail/tail_guarded", headers={"Sec-Fetch-Site": "cross-site"})
    assert answer.status_code == 403


def test_a_topic_holding_messages_for_its_first_channel_is_not_tailed(cluster):
    topic_on(cluster, "tail_waiting", counts=(3, 0))
    answer = httpx.get(f"{cluster.admin.url}/api/tail/tail_waiting")
    assert answer.status_code == 409
    assert answer.json() == {"message": "TOPIC_HAS_NO_CHANNELS"}
    assert nsqd_stats(cluster, 0, "tail_waiting")["depth"] == 3
    page = httpx.get(f"{cluster.admin.url}/topics/tail_waiting").text
    assert 'id="tail-unavailable"' in page and 'id="tail-toggle"' not in page
    assert httpx.post(f"http://127.0.0.1:{cluster.nsqds[1].http_port}/channel/create",
                      params={"topic": "tail_waiting", "channel": "kept"}).status_code == 200
    tail = Tail(cluster.admin.url, "tail_waiting")
    try:
        assert tail.ready["nsqd"] == [f"127.0.0.1:{cluster.nsqds[1].tcp_port}"]
        assert nsqd_stats(cluster, 0, "tail_waiting")["depth"] == 3
        assert channels_on(cluster, 0, "tail_waiting") == []
    finally:
        tail.close()


def test_messages_of_every_nsqd_arrive_with_bodies_intact_hex_or_cut(cluster):
    topic_on(cluster, "tail_flow", "kept", counts=(0, 0))
    tail = Tail(cluster.admin.url, "tail_flow")
    try:
        channel = tail.ready["channel"]
        assert channel.startswith("nsqadmin_tail_") and channel.endswith("#ephemeral")
        assert sorted(tail.ready["nsqd"]) == sorted(f"127.0.0.1:{n.tcp_port}" for n in cluster.nsqds)
        script = b"<script>alert('x')</script> & \"quotes\""
        binary = bytes([0, 159, 146, 150, 255])
        long_body = "é".encode() * 3000  # 6000 bytes of two-byte characters
        pub(cluster, 0, "tail_flow", script)
        pub(cluster, 1, "tail_flow", binary)
        pub(cluster, 0, "tail_flow", long_body)
        events = tail.messages(3)
        by_size = {event["size"]: event for event in events}
        shown = by_size[len(script)]
        assert shown["body_text"] == script.decode() and "body_hex" not in shown and not shown["truncated"]
        assert shown["nsqd"] == f"127.0.0.1:{cluster.nsqds[0].tcp_port}" and shown["attempts"] == 1
        assert len(shown["id"]) == 16 and abs(shown["timestamp"] / 1e9 - time.time()) < 60
        hexed = by_size[len(binary)]
        assert hexed["body_hex"] == binary.hex() and "body_text" not in hexed
        assert hexed["nsqd"] == f"127.0.0.1:{cluster.nsqds[1].tcp_port}"
        cut = by_size[len(long_body)]
        assert cut["truncated"] and cut["body_text"] == "é" * (MAX_BODY // 2)
        wait_for(lambda: all(c["depth"] == 0 and c["in_flight_count"] == 0 and c["message_count"] == 2
                             for c in nsqd_stats(cluster, 0, "tail_flow")["channels"] if c["channel_name"] == channel),
                 what="the tail finished what it received")
    finally:
        tail.close()


def test_past_20_a_second_messages_are_dropped_and_counted(cluster):
    topic_on(cluster, "tail_burst", "kept", counts=(0,))
    tail = Tail(cluster.admin.url, "tail_burst")
    try:
        body = b"\n".join(b"burst %d" % i for i in range(300))
        assert httpx.post(f"http://127.0.0.1:{cluster.nsqds[0].http_port}/mpub", params={"topic": "tail_burst"},
                          content=body).status_code == 200
        received, dropped = 0, 0
        started = time.monotonic()
        deadline = started + 6
        for kind, data in tail.events():
            if kind == "message":
                received += 1
            dropped = data.get("dropped", dropped)
            if received + dropped == 300 or time.monotonic() > deadline:
                break
        elapsed = time.monotonic() - started
        assert received + dropped == 300
        assert 20 <= received <= 20 + 20 * elapsed + 1 and dropped == 300 - received
    finally:
        tail.close()


def test_closing_the_stream_deletes_the_ephemeral_channel(cluster):
    topic_on(cluster, "tail_close", "kept", counts=(0, 0))
    tail = Tail(cluster.admin.url, "tail_close")
    channel = tail.ready["channel"]
    for n in (0, 1):
        assert channel in channels_on(cluster, n, "tail_close")
    tail.close()
    for n in (0, 1):
        wait_for(lambda: channel not in channels_on(cluster, n, "tail_close"), timeout=5,
                 what=f"{channel} gone from nsqd {n}")
        assert channels_on(cluster, n, "tail_close") == ["kept"]


@pytest.mark.browser
def test_the_topic_page_tails_a_hostile_body_as_text(cluster, chromium, screenshot):
    topic_on(cluster, "tail_page", "archive", counts=(0, 0))
    context = chromium.new_context(base_url=cluster.admin.url, viewport={"width": 1360, "height": 900})
    page = context.new_page()
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    try:
        page.goto("/topics/tail_page")
        panel = page.locator("#live-tail")
        expect(panel).to_be_visible()
        page.locator("#tail-toggle").click()
        expect(page.locator("#tail-status")).to_contain_text("nsqadmin_tail_")
        hostile = "<img src=x onerror=alert(1)>"
        pub(cluster, 0, "tail_page", hostile.encode())
        pub(cluster, 1, "tail_page", bytes([0xDE, 0xAD, 0xBE, 0xEF, 0xFF]))
        expect(panel.locator(".tail-body")).to_have_count(2)
        expect(panel.locator(".tail-body", has_text=hostile)).to_have_count(1)
        expect(panel.locator(".tail-hex")).to_have_text("de ad be ef ff")
        assert panel.locator("img").count() == 0 and dialogs == []
        channel = page.locator("#tail-status").text_content().split()[-1]
        screenshot(page, "live-tail")
        page.close()
        for n in (0, 1):
            wait_for(lambda: channel not in channels_on(cluster, n, "tail_page"), timeout=5,
                     what=f"{channel} gone from nsqd {n} once the page closed")
    finally:
        context.close()
