"""The stats history in nsqadmin's JSON API and pages, from rollup files written by hand into the
--stats-dir of a real nsqadmin in front of a real cluster: /api/rollups and /api/health, the charts of
the topic, channel, node and counter pages, the topics list's rate and health columns."""

import html
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest

from nsqadmin.history import layout

from .admin_helpers import Cluster, topic_on
from .history_rows import window_row, write_rollups

# The history ends at the minute the module's cluster starts; the tests read these after it has.
NOW_MINUTE = START = 0
HOSTILE_REASON = 'depth 5 and <b>no</b> consumer "connected"'


def known_history(stats_dir: Path, node0: str, node1: str) -> None:
    """An hour of 1-minute windows of topic "hist" (channel "work") on two nodes up to this minute, and health."""
    global NOW_MINUTE, START
    NOW_MINUTE = int(time.time()) // 60 * 60
    START = NOW_MINUTE - 59 * 60
    rows = []
    for minute in range(60):
        ts = START + 60 * minute
        for node, share in ((node0, 1), (node1, 2)):
            rows.append(window_row(ts, "hist", node=node, messages=60 * share, rate=float(share)))
            rows.append(window_row(ts, "hist", "work", node=node, messages=60 * share, rate=float(share),
                                   depth_max=minute * share, in_flight_max=share))
        rows.append(window_row(ts, "hist", messages=180, rate=3.0))
        rows.append(window_row(ts, "hist", "work", messages=180, rate=3.0, depth_max=3 * minute, in_flight_max=3))
    write_rollups(stats_dir, "1m", rows)
    write_rollups(stats_dir, "1h", [window_row(START // 3600 * 3600, "hist", "work", messages=10800, rate=3.0)])
    layout.write_json(stats_dir / "rollups" / "health.json", {"generated": NOW_MINUTE, "channels": [
        {"topic": "hist", "channel": "work", "status": "NO_CONSUMERS", "reason": HOSTILE_REASON, "depth": 5,
         "rate": 3.0, "clients": 0, "ts": NOW_MINUTE}]})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    stats_dir = tmp_path_factory.mktemp("stats")
    running = Cluster(tmp_path_factory.mktemp("cluster"), f"--stats-dir={stats_dir}", "--stats-interval=0")
    topic_on(running, "hist", "work", (1, 1))
    known_history(stats_dir, running.node(0), running.node(1))
    yield running
    assert running.stop() == [0, 0, 0, 0]


@pytest.fixture
def client(cluster):
    with httpx.Client(base_url=cluster.admin.url) as session:
        yield session


def test_rollups_across_nodes_oldest_first(client):
    answer = client.get("/api/rollups", params={"topic": "hist", "channel": "work", "window": "1m"})
    assert answer.status_code == 200
    body = answer.json()
    assert body["window"] == "1m" and len(body["series"]) == 60
    first = body["series"][0]
    assert first["ts"] == START and first["messages"] == 180 and first["rate"] == 3.0
    assert [point["depth_max"] for point in body["series"][:3]] == [0, 3, 6]
    assert {"ts", "messages", "rate", "depth_max", "depth_avg", "depth_p95", "in_flight_max", "requeues",
            "timeouts", "clients_max"} <= set(first)


def test_rollups_of_one_node_since_a_time_and_of_other_windows(cluster, client):
    answer = client.get("/api/rollups", params={"topic": "hist", "channel": "work", "node": cluster.node(1),
                                                "since": START + 1800}).json()
    assert [point["ts"] for point in answer["series"]] == list(range(START + 1800, NOW_MINUTE + 1, 60))
    assert {point["rate"] for point in answer["series"]} == {2.0}
    hourly = client.get("/api/rollups", params={"topic": "hist", "channel": "work", "window": "1h"}).json()
    assert hourly["window"] == "1h" and [point["messages"] for point in hourly["series"]] == [10800]
    assert client.get("/api/rollups", params={"topic": "hist", "window": "1d"}).json() == {"window": "1d", "series": []}


@pytest.mark.parametrize("params, status, message", [
    ({}, 400, "MISSING_ARG_TOPIC"),
    ({"topic": "bad topic!"}, 400, "INVALID_ARG_TOPIC"),
    ({"topic": "hist", "channel": "x" * 65}, 400, "INVALID_ARG_CHANNEL"),
    ({"topic": "hist", "window": "5m"}, 400, "INVALID_ARG_WINDOW"),
    ({"topic": "hist", "since": "yesterday"}, 400, "INVALID_ARG_SINCE"),
    ({"topic": "hist", "since": "-5"}, 400, "INVALID_ARG_SINCE"),
])
def test_rollups_refuse_bad_arguments_with_nsq_style_errors(client, params, status, message):
    answer = client.get("/api/rollups", params=params)
    assert (answer.status_code, answer.json()) == (status, {"message": message})


def test_health_lists_every_channel(client):
    assert client.get("/api/health").json() == {"generated": NOW_MINUTE, "channels": [
        {"topic": "hist", "channel": "work", "status": "NO_CONSUMERS", "reason": HOSTILE_REASON, "depth": 5,
         "rate": 3.0, "clients": 0, "ts": NOW_MINUTE}]}


def charts(html: str) -> list[ET.Element]:
    """The SVG charts of a page, parsed (each must be well-formed XML)."""
    found, rest = [], html
    while "<svg" in rest:
        start = rest.index("<svg")
        end = rest.index("</svg>", start) + len("</svg>")
        found.append(ET.fromstring(rest[start:end]))
        rest = rest[end:]
    return found


def chart_texts(chart: ET.Element) -> list[str]:
    return ["".join(node.itertext()) for node in chart.iter("{http://www.w3.org/2000/svg}text")]


def test_channel_page_charts_rate_depth_and_in_flight_with_their_current_values(client):
    page = client.get("/topics/hist/work", headers={"Accept": "text/html"}).text
    drawn = charts(page)
    assert [chart_texts(chart)[:2] for chart in drawn] == [
        ["Message rate (msg/s)", "now 3 msg/s"], ["Depth (messages, highest in each window)", "now 177 messages"],
        ["In flight (messages, highest in each window)", "now 3 messages"]]
    assert "NO CONSUMERS" in page
    assert "&lt;b&gt;no&lt;/b&gt; consumer &#34;connected&#34;" in page and "<b>no</b>" not in page


def test_ranges_are_links_and_a_range_without_data_says_why(cluster, client):
    page = client.get("/topics/hist/work", params={"range": "7d"}, headers={"Accept": "text/html"}).text
    assert 'href="/topics/hist/work?range=24h#history"' in page and 'class="active" aria-current="page">7d' in page
    assert len(charts(page)) == 3  # the hourly window drawn across a week
    node = client.get(f"/nodes/{cluster.node(0)}", params={"range": "24h"}, headers={"Accept": "text/html"}).text
    assert "Recording is off: nsqadmin was started with --stats-interval=0." in node and not charts(node)


def test_topic_node_and_counter_pages_chart_their_history(cluster, client):
    topic = client.get("/topics/hist", headers={"Accept": "text/html"}).text
    assert chart_texts(charts(topic)[0])[:2] == ["Message rate (msg/s)", "now 3 msg/s"]
    assert '<td class="num" title="newest 1-minute window">3/s</td>' in topic
    node = client.get(f"/nodes/{cluster.node(1)}", headers={"Accept": "text/html"}).text
    assert chart_texts(charts(node)[0])[:2] == ["Message rate (msg/s)", "now 2 msg/s"]
    counter = client.get("/counter", headers={"Accept": "text/html"}).text
    assert chart_texts(charts(counter)[0])[:2] == ["Messages processed by every channel (msg/s)", "now 3 msg/s"]


def test_topics_list_shows_the_rate_and_channels_needing_attention(client):
    page = client.get("/topics", headers={"Accept": "text/html"}).text
    row = page[page.index('href="/topics/hist"'):]
    row = row[:row.index("</tr>")]
    assert "3/s" in row and "work: NO CONSUMERS" in row


def test_unreadable_history_is_an_error_in_the_api_and_a_note_on_pages(tmp_path_factory):
    stats_dir = tmp_path_factory.mktemp("broken")
    rows = [window_row(int(time.time()) // 60 * 60, "hist", "work", rate=1.0)]
    for path in write_rollups(stats_dir, "1m", rows):
        path.write_bytes(b"PAR1 this is not a parquet file")
    running = Cluster(tmp_path_factory.mktemp("cluster"), f"--stats-dir={stats_dir}")
    try:
        topic_on(running, "hist", "work", (1,))
        answer = httpx.get(f"{running.admin.url}/api/rollups", params={"topic": "hist", "channel": "work"})
        assert (answer.status_code, answer.json()) == (500, {"message": "INTERNAL_ERROR"})
        page = httpx.get(f"{running.admin.url}/topics/hist/work", headers={"Accept": "text/html"})
        assert page.status_code == 200
        assert "The stats history cannot be read: see nsqadmin's log." in html.unescape(page.text)
        assert "cannot read the stats history" in running.admin.log()
    finally:
        assert running.stop() == [0, 0, 0, 0]
