"""The stats history end to end, in a real browser: a real cluster with steady traffic, nsqadmin
recording every 200 ms and running the real Spark rollup job on a schedule, then the channel page's
chart and /api/rollups showing the rate that was actually published. Screenshots under
artifacts/screenshots/ (history-*.png)."""

import re
import threading
import time

import httpx
import pytest
from playwright.sync_api import expect

from .admin_helpers import Cluster, Consumer, topic_on, wait_for

pytestmark = pytest.mark.browser

BATCH, PERIOD = 10, 0.1  # 100 messages a second


class SteadyPublisher:
    """MPUBs ``BATCH`` messages every ``PERIOD`` seconds on the clock, in a thread, until stopped."""

    def __init__(self, http_port: int, topic: str):
        self.url = f"http://127.0.0.1:{http_port}/mpub"
        self.topic = topic
        self.sent = 0
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        body = b"\n".join(b"reading %d" % i for i in range(BATCH))
        with httpx.Client() as client:
            tick = self.started
            while not self._stop.is_set():
                client.post(self.url, params={"topic": self.topic}, content=body)
                self.sent += BATCH
                tick += PERIOD
                self._stop.wait(max(0.0, tick - time.monotonic()))

    @property
    def rate(self) -> float:
        return self.sent / (time.monotonic() - self.started)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    running = Cluster(tmp_path_factory.mktemp("cluster"), "--stats-interval=200ms", "--rollup-interval=4s",
                      "--spark-master=local[1]")
    yield running
    assert running.stop() == [0, 0, 0, 0]


def newest_rate(cluster: Cluster) -> float | None:
    answer = httpx.get(f"{cluster.admin.url}/api/rollups",
                       params={"topic": "sensors", "channel": "archive", "window": "1m"}).json()
    full = [point for point in answer["series"] if point["messages"] >= 1000]  # windows with >= 10 s of traffic
    return full[-1]["rate"] if full else None


def test_the_channel_chart_shows_the_published_rate(cluster, chromium, screenshot):
    topic_on(cluster, "sensors", "archive", (0,))
    consumer = Consumer(cluster.nsqds[0].tcp_port, "sensors", "archive", rdy=200)
    publisher = SteadyPublisher(cluster.nsqds[0].http_port, "sensors")
    try:
        rate = wait_for(lambda: newest_rate(cluster), timeout=120, what="a rolled-up window with traffic")
        assert rate == pytest.approx(publisher.rate, rel=0.15)
        context = chromium.new_context(base_url=cluster.admin.url, viewport={"width": 1360, "height": 900})
        page = context.new_page()
        page.goto("/topics/sensors/archive")
        charts = page.locator("svg.chart")
        expect(charts).to_have_count(3)
        now_text = charts.first.locator(".chart-now").text_content()
        shown = float(re.fullmatch(r"now ([\d.]+) msg/s", now_text).group(1))
        assert shown == pytest.approx(publisher.rate, rel=0.2)
        expect(page.locator("#history .ranges a.active")).to_have_text("1h")
        screenshot(page, "history-channel")
        page.goto("/topics")
        row = page.locator("#topics tbody tr", has_text="sensors")
        expect(row.locator("td[title='newest 1-minute window']")).to_have_text(re.compile(r"\d+(\.\d+)?/s"))
        screenshot(page, "history-topics")
        page.goto("/topics/sensors/archive?range=24h")
        expect(page.locator("svg.chart")).to_have_count(3)
        screenshot(page, "history-channel-24h")
        context.close()
        health = httpx.get(f"{cluster.admin.url}/api/health").json()
        assert {(c["topic"], c["channel"]) for c in health["channels"]} >= {("sensors", "archive")}
    finally:
        publisher.stop()
        consumer.close()
