"""The stats history end to end, in a real browser: a real cluster with steady traffic, nsqadmin
recording every 200 ms and running the real Spark rollup job on a schedule, then the channel page's
chart and /api/rollups showing the rate that was actually published; and a day of generated
snapshots rolled up behind the 24h and 7d charts. Screenshots under artifacts/screenshots/
(history-*.png)."""

import re
import threading
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from playwright.sync_api import expect

from bench.history_data import ClusterShape, generate
from nsqadmin.history.rollup_job import run_rollup

from .admin_helpers import AdminProcess, Cluster, Consumer, topic_on, wait_for
from .helpers import NsqdProcess
from .spark_fixtures import spark  # noqa: F401

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


def newest_rate(cluster: Cluster, window: str = "1m") -> float | None:
    answer = httpx.get(f"{cluster.admin.url}/api/rollups",
                       params={"topic": "sensors", "channel": "archive", "window": window}).json()
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
        # the worker writes the hour's window within ten runs of its minutes (40 s at a 4 s interval)
        wait_for(lambda: newest_rate(cluster, "1h"), timeout=120, what="the hour's rolled-up window")
        page.goto("/topics/sensors/archive?range=24h")
        expect(page.locator("svg.chart")).to_have_count(3)
        screenshot(page, "history-channel-24h")
        context.close()
        health = httpx.get(f"{cluster.admin.url}/api/health").json()
        assert {(c["topic"], c["channel"]) for c in health["channels"]} >= {("sensors", "archive")}
    finally:
        publisher.stop()
        consumer.close()


def test_charts_over_24h_and_7d_with_a_day_of_data_behind_them(spark, chromium, screenshot, tmp_path):  # noqa: F811
    """24 hours of 10-second snapshots of 2 nodes (bench/history_data.py: daily restarts, backlogs
    rising and falling) rolled up by the job, then the channel page's 24h and 7d ranges."""
    stats_dir = tmp_path / "stats"
    now = datetime.now(timezone.utc)
    generate(stats_dir, ClusterShape(nodes=2, channels=4, topics=2), 24,
             start=now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=24))
    run_rollup(stats_dir, spark, retention=timedelta(days=30))
    nsqd = NsqdProcess(f"--data-path={tmp_path}")
    admin = None
    try:
        for path in ("/topic/create?topic=topic-0", "/channel/create?topic=topic-0&channel=channel-0"):
            assert httpx.post(f"http://127.0.0.1:{nsqd.http_port}{path}").status_code == 200
        admin = AdminProcess(f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}", f"--stats-dir={stats_dir}",
                             "--stats-interval=0")
        context = chromium.new_context(base_url=admin.url, viewport={"width": 1360, "height": 900})
        page = context.new_page()
        for range_name in ("24h", "7d"):
            page.goto(f"/topics/topic-0/channel-0?range={range_name}")
            charts = page.locator("svg.chart")
            expect(charts).to_have_count(3)
            expect(page.locator("#history .ranges a.active")).to_have_text(range_name)
            expect(charts.first.locator(".chart-now")).to_have_text(re.compile(r"now [\d.,]+ msg/s"))
            screenshot(page, f"history-channel-day-{range_name}")
        page.goto("/counter?range=24h")
        expect(page.locator("svg.chart")).to_have_count(1)
        screenshot(page, "history-counter-day-24h")
        context.close()
    finally:
        if admin is not None:
            assert admin.stop() == 0
        assert nsqd.stop() == 0
