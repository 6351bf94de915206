"""nsqadmin and the limits beyond NSQ (README "Pace a channel", "Bounded queues"), with a real cluster:
a channel's pace set from its page (confirmed, CSRF-protected, admin-only, notified), the pace and
the queues' fill shown on the topic and channel pages, in a browser too (screenshots), and NSQ
v1.3.0's nsqadmin reading our /stats with the extra keys."""

import re

import httpx
import pytest
from playwright.sync_api import expect

from .admin_helpers import Cluster, RecordingEndpoint, nsqd_stats, publish, topic_on, wait_for
from .go_nsq import GoAdminProcess, requires_go


@pytest.fixture(scope="module")
def sink():
    endpoint = RecordingEndpoint()
    yield endpoint
    endpoint.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, sink):
    running = Cluster(tmp_path_factory.mktemp("cluster"), f"--notification-http-endpoint={sink.url}")
    yield running
    assert running.stop() == [0, 0, 0, 0]


@pytest.fixture
def browser(cluster):
    with httpx.Client(base_url=cluster.admin.url, headers={"Accept": "text/html"}) as client:
        yield client


def csrf_of(browser, path: str) -> str:
    browser.get(path)
    return browser.cookies["nsqadmin_csrf"]


def paces(cluster: Cluster, topic: str, channel: str) -> list:
    return [next(c for c in nsqd_stats(cluster, n, topic)["channels"] if c["channel_name"] == channel).get("pace")
            for n in (0, 1)]


def nsqd_post(cluster: Cluster, n: int, path: str, **params) -> None:
    answer = httpx.post(f"http://127.0.0.1:{cluster.nsqds[n].http_port}{path}", params=params)
    assert answer.status_code == 200, answer.text


def test_pace_a_channel_from_its_page_without_javascript(cluster, browser, sink):
    topic_on(cluster, "paced", "c")
    token = csrf_of(browser, "/topics/paced/c")
    page = browser.get("/topics/paced/c").text
    assert 'name="action" value="pace"' in page and 'name="rate"' in page and 'id="channel-pace"' not in page
    confirm = browser.post("/topics/paced/c", data={"csrf": token, "action": "pace", "rate": "25"})
    assert confirm.status_code == 200 and "Pace channel c of topic paced?" in confirm.text
    assert "at most 25 messages a second of channel c" in confirm.text
    assert paces(cluster, "paced", "c") == [None, None]  # nothing done yet
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', confirm.text))
    assert fields == {"csrf": token, "action": "pace", "rate": "25", "confirm": "yes"}
    done = browser.post("/topics/paced/c", data=fields)
    assert done.status_code == 303 and done.headers["location"] == "/topics/paced/c"
    assert paces(cluster, "paced", "c") == [25, 25]
    after = browser.get("/topics/paced/c").text
    assert "Paced channel c of topic paced at 25 messages a second." in after
    assert re.search(r'id="channel-pace">Pace:\s+at most <strong>25</strong> messages a second on each nsqd', after)
    assert 'value="25" class="pace-input"' in after
    noted = wait_for(lambda: [n for n in sink.received if n["action"] == "pace_channel"], what="the notification")
    assert (noted[0]["topic"], noted[0]["channel"]) == ("paced", "c")

    nsqd_post(cluster, 1, "/channel/pace", topic="paced", channel="c", rate="7")
    assert re.search(r'id="channel-pace">Pace:\s+differs between nodes', browser.get("/topics/paced/c").text)
    lifted = browser.post("/topics/paced/c", data={**fields, "rate": "0"}, follow_redirects=True)
    assert "Lifted the pace of channel c of topic paced." in lifted.text and 'id="channel-pace"' not in lifted.text
    assert paces(cluster, "paced", "c") == [None, None]


@pytest.mark.parametrize("rate", ["abc", "-1", "1.5", "1e30", "1000000001", ""])
def test_bad_paces_are_refused_by_the_page(cluster, browser, rate):
    topic_on(cluster, "badpace", "c")
    token = csrf_of(browser, "/topics/badpace/c")
    answer = browser.post("/topics/badpace/c", data={"csrf": token, "action": "pace", "rate": rate, "confirm": "yes"})
    assert answer.status_code == 400 and "is not a whole number of messages a second" in answer.text
    assert paces(cluster, "badpace", "c") == [None, None]


def test_the_pace_form_needs_the_csrf_token(cluster, browser):
    topic_on(cluster, "forged", "c")
    csrf_of(browser, "/topics/forged/c")
    answer = browser.post("/topics/forged/c", data={"csrf": "forged", "action": "pace", "rate": "5", "confirm": "yes"})
    assert answer.status_code == 403 and paces(cluster, "forged", "c") == [None, None]


def test_the_fill_of_bounded_queues_on_the_topic_and_channel_pages(cluster, browser):
    topic_on(cluster, "bounded", "c")
    for n in (0, 1):
        nsqd_post(cluster, n, "/topic/max_queue_bytes", topic="bounded", max_queue_bytes="2048")
    publish(cluster, 0, "bounded", 3)  # 3 messages of 35 bytes as counted (26 of header)
    topic = browser.get("/topics/bounded").text
    assert re.search(r'id="topic-queue-bound">Queue bound\s+<strong>2.0 KiB</strong> \(refuse\)', topic)
    channel = browser.get("/topics/bounded/c").text
    assert re.search(r"the channel&#39;s queue holds\s+<strong>", channel)
    assert f"<strong>105 B</strong> (5.1%) on {cluster.node(0)}" in channel  # the nodes in NSQ's order
    assert f"<strong>0 B</strong> (0.0%) on {cluster.node(1)}" in channel
    assert "bounded" in browser.get("/topics").text


@pytest.mark.browser
def test_pace_from_the_page_in_a_browser(cluster, chromium, screenshot):
    topic_on(cluster, "browsed", "c", (40, 0))
    for n in (0, 1):
        nsqd_post(cluster, n, "/topic/max_queue_bytes", topic="browsed", max_queue_bytes="1048576")
    context = chromium.new_context(base_url=cluster.admin.url, viewport={"width": 1360, "height": 860})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        page.goto("/topics/browsed/c")
        page.locator("input.pace-input").fill("12")
        page.get_by_role("button", name="Set pace").click()
        expect(page.locator(".banner-ok")).to_have_text("Paced channel c of topic browsed at 12 messages a second.")
        expect(page.locator("#channel-pace")).to_contain_text("at most 12 messages a second on each nsqd")
        expect(page.locator("#channel-queue-bound")).to_contain_text("Queue bound 1.0 MiB: the channel's queue holds")
        expect(page.locator("#channel-queue-bound")).to_contain_text(f"1.4 KiB (0.1%) on {cluster.node(0)}")
        screenshot(page, "channel-paced-and-bounded")
        assert paces(cluster, "browsed", "c") == [12, 12]
        page.goto("/topics/browsed")
        expect(page.locator("#topic-queue-bound")).to_contain_text("Queue bound 1.0 MiB")
        screenshot(page, "topic-bounded")
    finally:
        context.close()


@requires_go
def test_nsqs_nsqadmin_reads_our_stats_with_the_extra_keys(cluster):
    topic_on(cluster, "extras", "c", (3, 0))
    nsqd_post(cluster, 0, "/topic/max_queue_bytes", topic="extras", max_queue_bytes="4096")
    nsqd_post(cluster, 0, "/channel/pace", topic="extras", channel="c", rate="3")
    go_admin = GoAdminProcess(f"--nsqd-http-address=127.0.0.1:{cluster.nsqds[0].http_port}")
    try:
        topic = httpx.get(f"{go_admin.url}/api/topics/extras").json()
        assert (topic["depth"], topic["message_count"]) == (0, 3)  # its channel holds them
        channel = httpx.get(f"{go_admin.url}/api/topics/extras/c").json()
        assert (channel["depth"], channel["message_count"], channel["paused"]) == (3, 3, False)
        assert "pace" not in channel  # NSQ's nsqadmin keeps its own keys
    finally:
        assert go_admin.stop() == 0
