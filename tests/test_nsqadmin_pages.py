"""nsqadmin's pages as a browser without JavaScript gets them: every page renders from a real cluster,
every value from clients and publishers is escaped, actions go through a confirmation page and a
CSRF-protected form, and the outcome shows once after a redirect (so a reload repeats nothing)."""

import re

import httpx
import pytest

from .admin_helpers import Cluster, Consumer, cluster, nsqd_stats, topic_on, wait_for  # noqa: F401

HOSTILE = '<script>alert("x")</script>'
HOSTILE_AGENT = "agent\"><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module", autouse=True)
def hostile_consumer(cluster):
    """Topic "pages" on both nsqd (one message each), and a consumer whose IDENTIFY is hostile HTML."""
    topic_on(cluster, "pages", "view", (1, 1))
    topic_on(cluster, "pages", "odd#ephemeral", (0,))
    consumer = Consumer(cluster.nsqds[0].tcp_port, "pages", "view", rdy=1, client_id=HOSTILE,
                        hostname=HOSTILE + ".example", user_agent=HOSTILE_AGENT)
    wait_for(lambda: consumer.delivered == 1)
    yield consumer
    consumer.close()


@pytest.fixture
def browser(cluster):
    with httpx.Client(base_url=cluster.admin.url, headers={"Accept": "text/html"}) as client:
        yield client


def page_paths(cluster: Cluster) -> list[str]:
    return ["/", "/topics", "/topics/pages", "/topics/pages/view", "/topics/pages/odd%23ephemeral", "/nodes",
            f"/nodes/{cluster.node(0)}", "/counter", "/lookup"]


def test_every_page_renders_as_html(cluster, browser):
    for path in page_paths(cluster):
        page = browser.get(path)
        assert page.status_code == 200, path
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["cache-control"] == "no-store"
        assert "<title>" in page.text and "Partial results" not in page.text, path


def test_hostile_client_values_are_escaped_everywhere(cluster, browser):
    for path in page_paths(cluster):
        text = browser.get(path).text
        assert "<script>alert" not in text and "<img src=x" not in text, path
    channel = browser.get("/topics/pages/view").text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in channel
    assert "agent&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in channel


def test_names_with_hashes_link_escaped(cluster, browser):
    topic = browser.get("/topics/pages").text
    assert 'href="/topics/pages/odd%23ephemeral"' in topic
    assert "odd#ephemeral" in browser.get("/topics/pages/odd%23ephemeral").text


def test_topics_page_summarises_each_topic(cluster, browser):
    page = browser.get("/").text
    row = re.search(r'<a href="/topics/pages">pages</a>.*?</tr>', page, re.S).group(0)
    cells = re.findall(r'<td class="num[^"]*">([^<]*)</td>', row)
    # nodes, channels, depth (view on nsqd 1; nsqd 0's went to the consumer), in flight, messages, data, clients
    assert cells == ["2", "2", "1", "0", "2", "18 B", "1"]


def test_missing_things_are_404_pages(cluster, browser):
    for path, text in (("/topics/never-seen", "No nsqlookupd knows this topic"),
                       ("/topics/pages/absent", "No nsqd has this channel"),
                       ("/nodes/10.0.0.1:1", "No nsqd at 10.0.0.1:1"), ("/no/such/page", "Nothing here")):
        page = browser.get(path)
        assert page.status_code == 404 and text in page.text, path


def csrf_of(browser) -> str:
    browser.get("/topics/pages")
    return browser.cookies["nsqadmin_csrf"]


def test_an_action_without_javascript(cluster, browser):
    token = csrf_of(browser)
    confirm = browser.post("/topics/pages/view", data={"csrf": token, "action": "pause"})
    assert confirm.status_code == 200 and "Pause channel view of topic pages?" in confirm.text
    assert nsqd_stats(cluster, 0, "pages")["channels"][-1]["paused"] is False  # nothing done yet
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', confirm.text))
    assert fields == {"csrf": token, "action": "pause", "confirm": "yes"}
    done = browser.post("/topics/pages/view", data=fields)
    assert done.status_code == 303 and done.headers["location"] == "/topics/pages/view"
    assert [c["paused"] for c in nsqd_stats(cluster, 0, "pages")["channels"] if c["channel_name"] == "view"] == [True]
    after = browser.get("/topics/pages/view")
    assert "Paused channel view of topic pages." in after.text and "badge-paused" in after.text
    again = browser.get("/topics/pages/view")  # the message shows once; the state stays
    assert "Paused channel view of topic pages." not in again.text and "Unpause" in again.text
    browser.post("/topics/pages/view", data={"csrf": token, "action": "unpause", "confirm": "yes"})
    assert "Pause" in browser.get("/topics/pages/view").text


def test_forms_need_the_csrf_token_of_the_cookie(cluster, browser):
    csrf_of(browser)
    for fields in ({"action": "pause", "confirm": "yes"}, {"csrf": "forged", "action": "pause", "confirm": "yes"}):
        answer = browser.post("/topics/pages/view", data=fields)
        assert answer.status_code == 403 and "This form has expired" in answer.text
    with httpx.Client(base_url=cluster.admin.url) as stranger:  # the token without the cookie
        answer = stranger.post("/topics/pages/view", data={"csrf": browser.cookies["nsqadmin_csrf"], "action": "pause",
                                                            "confirm": "yes"})
        assert answer.status_code == 403
    cross = browser.post("/topics/pages/view", data={"csrf": browser.cookies["nsqadmin_csrf"], "action": "pause",
                                                     "confirm": "yes"}, headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403
    assert not any(c["paused"] for c in nsqd_stats(cluster, 0, "pages")["channels"])


def test_unknown_actions_and_bad_names_are_refused(cluster, browser):
    token = csrf_of(browser)
    assert browser.post("/topics/pages", data={"csrf": token, "action": "explode"}).status_code == 400
    bad = browser.post("/lookup", data={"csrf": token, "topic": "no spaces"}, follow_redirects=True)
    assert "is not a valid name" in bad.text


def test_create_from_the_lookup_page_then_delete_it(cluster, browser):
    token = csrf_of(browser)
    created = browser.post("/lookup", data={"csrf": token, "topic": "made-here", "channel": "ch"},
                           follow_redirects=True)
    assert "Created channel ch of topic made-here." in created.text
    row = re.search(r'<a href="/topics/made-here">made-here</a>.*?</tr>', created.text, re.S).group(0)
    assert ">ch" in row
    deleted = browser.post("/topics/made-here", data={"csrf": token, "action": "delete", "confirm": "yes",
                                                      "from": "lookup"}, follow_redirects=True)
    assert deleted.url.path == "/lookup" and "Deleted topic made-here." in deleted.text
    assert "made-here" not in httpx.get(f"http://{cluster.lookupd_http}/topics").json()["topics"]


def test_tombstone_from_the_topic_page(cluster, browser):
    topic_on(cluster, "stone")
    token = csrf_of(browser)
    page = browser.post("/topics/stone", data={"csrf": token, "action": "tombstone", "node": cluster.node(1),
                                               "confirm": "yes"}, follow_redirects=True)
    assert f"Tombstoned topic stone on {cluster.node(1)}." in page.text
    assert nsqd_stats(cluster, 1, "stone") is None and nsqd_stats(cluster, 0, "stone") is not None


def lookupd_producers(cluster, topic: str) -> list[int]:
    answer = httpx.get(f"http://{cluster.lookupd_http}/lookup", params={"topic": topic}).json()
    return [producer["http_port"] for producer in answer["producers"]]


def test_tombstone_from_the_node_page(cluster, browser):
    """NSQ's node page has a tombstone button on each topic row: DELETE /api/nodes/:node {"topic"}."""
    topic_on(cluster, "gravel", "c", (2, 3))
    node = cluster.node(1)
    node_path = "/nodes/" + node.replace(":", "%3A")
    row = re.search(r'<a href="/topics/gravel">gravel</a>.*?</tr>', browser.get(node_path).text, re.S).group(0)
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', row))
    assert fields == {"csrf": csrf_of(browser), "action": "tombstone", "topic": "gravel"}
    assert f'action="{node_path}"' in row
    confirm = browser.post(node_path, data=fields)
    assert confirm.status_code == 200 and f"Tombstone topic gravel on {node}?" in confirm.text
    assert nsqd_stats(cluster, 1, "gravel") is not None  # nothing done yet
    done = browser.post(node_path, data={**fields, "confirm": "yes"})
    assert done.status_code == 303 and done.headers["location"] == node_path
    after = browser.get(node_path).text
    assert f"Tombstoned topic gravel on {node}." in after and 'href="/topics/gravel"' not in after
    assert nsqd_stats(cluster, 1, "gravel") is None and nsqd_stats(cluster, 0, "gravel")["message_count"] == 2
    assert lookupd_producers(cluster, "gravel") == [cluster.nsqds[0].http_port]


def test_the_node_page_form_refuses_what_the_other_forms_refuse(cluster, browser):
    topic_on(cluster, "kept", "", (1, 1))
    node = cluster.node(0)
    token = csrf_of(browser)
    tombstone = {"csrf": token, "action": "tombstone", "topic": "kept", "confirm": "yes"}
    assert browser.post(f"/nodes/{node}", data={**tombstone, "csrf": "forged"}).status_code == 403
    cross = browser.post(f"/nodes/{node}", data=tombstone, headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403
    assert browser.post(f"/nodes/{node}", data={**tombstone, "action": "pause"}).status_code == 400
    bad = browser.post(f"/nodes/{node}", data={**tombstone, "topic": "no spaces"})
    assert bad.status_code == 400 and "is not a valid topic name" in bad.text
    assert nsqd_stats(cluster, 0, "kept") is not None
    assert sorted(lookupd_producers(cluster, "kept")) == sorted(nsqd.http_port for nsqd in cluster.nsqds)
