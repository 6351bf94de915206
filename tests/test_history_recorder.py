"""nsqadmin's stats recorder and rollup scheduler (issue 10), end to end: real nsqlookupd, nsqd and
nsqadmin processes on loopback, the raw Parquet files read back with pyarrow. Also the raw writer
against a real directory that refuses writes, and the %v text of quantiles."""

import asyncio
import logging
import os
import re
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from nsqadmin.history.layout import RAW_SCHEMA, raw_dir, raw_partition, rollups_dir, visible_files
from nsqadmin.history.raw_rows import PollRows, go_float_text
from nsqadmin.history.raw_writer import STALE_SECONDS, RawWriter
from nsqadmin.history.recorder import LISTING_SECONDS, MIN_FLUSH_SECONDS, STATS_PATH, flush_seconds
from nsqadmin.history.stats_fetcher import StatsFetcher
from nsqadmin.nsqadmin import NSQAdmin
from nsqadmin.options import default_options

from .admin_helpers import AdminProcess, Cluster, Consumer, RecordingEndpoint, SilentServer, closed_port_address, \
    publish, topic_on, wait_for
from .feature_helpers import Certificates
from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess

INTERVAL_US = 200_000
RAW_FILE_NAME = re.compile(r"\d{8}T\d{6}-[0-9a-f]{8}\.parquet")


def recording(stats_dir: Path, interval: str = "200ms") -> list[str]:
    return [f"--stats-dir={stats_dir}", f"--stats-interval={interval}", "--rollup-interval=0"]


def raw_rows(stats_dir: Path) -> list[dict]:
    """Every row of every raw file, each file checked against the contract's schema."""
    rows = []
    for path in visible_files(raw_dir(stats_dir)):
        table = pq.read_table(path)
        assert table.schema == RAW_SCHEMA, path
        rows += table.to_pylist()
    return rows


def hidden_files(stats_dir: Path) -> list[str]:
    return [name for _, _, names in os.walk(stats_dir) for name in names if name.startswith(".")]


def ts_us(row: dict) -> int:
    stamp = row["ts"] - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (stamp.days * 86_400 + stamp.seconds) * 1_000_000 + stamp.microseconds


def last_poll(rows: list[dict], topic: str) -> dict[tuple[str, str], dict]:
    """(node, channel) -> row of ``topic`` in the last poll that recorded it."""
    last = max(row["ts"] for row in rows if row["topic"] == topic)
    return {(row["node"], row["channel"]): row for row in rows if row["topic"] == topic and row["ts"] == last}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A cluster whose nsqadmin recorded topic "hist" every 200 ms, then stopped (SIGTERM): nsqd 0
    (with e2e percentiles) has channels "ch" (5 messages waiting) and "done" (5 consumed), nsqd 1
    has "ch" (3 waiting). Yields (cluster, stats dir, rows); the nsqds keep running. The recording
    nsqadmin starts once nsqlookupd lists "hist" on both nsqd, so that its every poll has both."""
    stats_dir = tmp_path_factory.mktemp("history") / "stats"
    cluster = Cluster(tmp_path_factory.mktemp("cluster"), "--stats-interval=0")
    topic_on(cluster, "hist", "ch")
    assert cluster.admin.stop() == 0
    cluster.admin = cluster.start_admin(*recording(stats_dir))
    nsqd0 = f"http://{cluster.node(0)}"
    assert httpx.post(f"{nsqd0}/channel/create", params={"topic": "hist", "channel": "done"}).status_code == 200
    consumer = Consumer(cluster.nsqds[0].tcp_port, "hist", "done", rdy=10)
    publish(cluster, 0, "hist", 5)
    publish(cluster, 1, "hist", 3)
    wait_for(lambda: consumer.delivered == 5, what="5 messages consumed")
    wait_for(lambda: (httpx.get(f"{nsqd0}/stats", params={"format": "json", "topic": "hist"})
                      .json()["topics"][0]["channels"][1]["depth"] == 0), what="every FIN counted")
    time.sleep(1.0)  # five polls
    assert cluster.admin.stop() == 0
    consumer.close()
    yield cluster, stats_dir, raw_rows(stats_dir)
    assert cluster.stop()[1:] == [0, 0, 0]


def test_topic_and_channel_rows_carry_nsqds_numbers(recorded):
    cluster, _, rows = recorded
    node0, node1 = cluster.node(0), cluster.node(1)
    last = last_poll(rows, "hist")
    assert set(last) == {(node0, ""), (node0, "ch"), (node0, "done"), (node1, ""), (node1, "ch")}
    numbers = ("depth", "backend_depth", "in_flight", "deferred", "message_count", "requeue_count",
               "timeout_count", "client_count", "paused", "missing")
    assert [last[node0, ""][key] for key in numbers] == [0, 0, 0, 0, 5, 0, 0, 0, False, False]
    assert [last[node0, "ch"][key] for key in numbers] == [5, 0, 0, 0, 5, 0, 0, 0, False, False]
    assert [last[node0, "done"][key] for key in numbers] == [0, 0, 0, 0, 5, 0, 0, 1, False, False]
    assert [last[node1, ""][key] for key in numbers] == [0, 0, 0, 0, 3, 0, 0, 0, False, False]
    assert [last[node1, "ch"][key] for key in numbers] == [3, 0, 0, 0, 3, 0, 0, 0, False, False]


def test_e2e_percentiles_are_a_map_keyed_as_go_prints_the_quantile(recorded):
    cluster, _, rows = recorded
    last = last_poll(rows, "hist")
    done = dict(last[cluster.node(0), "done"]["e2e_ns"])
    assert set(done) == {"0.99", "0.5"} and all(value > 0 for value in done.values())
    assert set(dict(last[cluster.node(0), ""]["e2e_ns"])) == {"0.99", "0.5"}  # the topic's: its channels merged
    assert last[cluster.node(1), "ch"]["e2e_ns"] == [] and last[cluster.node(1), ""]["e2e_ns"] == []


def test_ticks_are_wall_clock_multiples_shared_by_every_node_of_a_poll(recorded):
    cluster, _, rows = recorded
    polls: dict[int, set[str]] = {}
    for row in rows:
        assert ts_us(row) % INTERVAL_US == 0
        if row["topic"] == "hist":
            polls.setdefault(ts_us(row), set()).add(row["node"])
    both = {cluster.node(0), cluster.node(1)}
    assert all(nodes == both for nodes in polls.values()) and not any(row["missing"] for row in rows)
    assert len(polls) >= 4


def test_files_are_whole_named_by_first_ts_and_in_their_hour(recorded):
    _, stats_dir, rows = recorded
    files = visible_files(raw_dir(stats_dir))
    assert files and not hidden_files(stats_dir)
    for path in files:
        assert RAW_FILE_NAME.fullmatch(path.name), path.name
        first = min(pq.read_table(path, columns=["ts"]).column("ts").to_pylist())
        assert path.name.startswith(f"{first:%Y%m%dT%H%M%S}-")
        assert path.parent == raw_partition(stats_dir, first)
    assert len({ts_us(row) for row in rows}) >= 5


def test_a_node_that_does_not_answer_is_one_missing_row(recorded, tmp_path):
    cluster, _, _ = recorded
    closed = closed_port_address()
    admin = AdminProcess(f"--nsqd-http-address={cluster.node(0)}", f"--nsqd-http-address={closed}",
                         *recording(tmp_path))
    time.sleep(0.7)
    assert admin.stop() == 0
    rows = raw_rows(tmp_path)
    missing = [row for row in rows if row["missing"]]
    assert missing and all(row["node"] == closed for row in missing)
    assert all(value is None for row in missing for key, value in row.items()
               if key not in ("ts", "node", "missing"))
    answered = {row["node"] for row in rows if not row["missing"]}
    assert answered == {cluster.node(0)}  # named by its /info, as the pages name it
    assert {ts_us(row) for row in missing} == {ts_us(row) for row in rows if row["node"] == cluster.node(0)}
    log = admin.log()
    assert log.count(f'stats: {closed}: Get "http://{closed}/stats?format=json&include_clients=false": '
                     f'dial tcp {closed}: connect: connection refused') == 1  # when it starts failing, not every poll


def test_when_no_nsqd_answers_only_missing_rows_are_recorded_with_a_warning(tmp_path):
    closed = closed_port_address()
    admin = AdminProcess(f"--nsqd-http-address={closed}", *recording(tmp_path))
    time.sleep(0.7)
    assert admin.stop() == 0
    rows = raw_rows(tmp_path)
    assert rows and all(row["missing"] and row["node"] == closed for row in rows)
    assert admin.log().count("WARNING: stats: no nsqd answered; recording 1 node(s) as missing") == 1


@pytest.mark.parametrize("depth, why", [("deep", "Expected `int`, got `str` - at `$.topics[0].depth`"),
                                        (2**63, "Expected `int` <= 9223372036854775807 - at `$.topics[0].depth`")])
def test_an_answer_that_is_not_nsqds_stats_is_a_missing_node(tmp_path, depth, why):
    fake = RecordingEndpoint(lambda path: (200, {"broadcast_address": "127.0.0.1", "http_port": 1}
                                           if path == "/info" else {"topics": [{"topic_name": "t", "depth": depth}]}))
    admin = AdminProcess(f"--nsqd-http-address={fake.address}", *recording(tmp_path))
    time.sleep(0.5)
    assert admin.stop() == 0
    fake.close()
    rows = raw_rows(tmp_path)
    assert rows and all(row["missing"] and row["node"] == "127.0.0.1:1" for row in rows)
    assert f"stats: 127.0.0.1:1: its answer is not nsqd's: {why}" in admin.log()


def test_a_slow_poll_skips_the_ticks_it_missed(tmp_path):
    """Every poll waits 500 ms for a node that never answers: the ticks it overran are skipped, not
    made up for, so polls are at least 600 ms apart, not every 200 ms."""
    silent = SilentServer()
    admin = AdminProcess(f"--nsqd-http-address={silent.address}", "--http-client-request-timeout=500ms",
                         "--log-level=debug", *recording(tmp_path))
    time.sleep(2.0)
    assert admin.stop() == 0
    silent.close()
    polls = sorted({ts_us(row) for row in raw_rows(tmp_path)})
    assert 2 <= len(polls) <= 4
    assert all(b - a >= 3 * INTERVAL_US for a, b in zip(polls, polls[1:]))
    assert re.search(r"DEBUG: stats: the poll took longer than --stats-interval; skipped [2-9] tick\(s\)", admin.log())


def test_nsqd_requiring_tls_is_recorded_over_https(tmp_path):
    certs = Certificates(tmp_path)
    nsqd = NsqdProcess(f"--data-path={tmp_path}", "--broadcast-address=127.0.0.1", "--tls-required=true",
                       f"--tls-cert={certs.cert_file}", f"--tls-key={certs.key_file}", "--https-address=127.0.0.1:0")
    try:
        node = f"127.0.0.1:{nsqd.http_port}"
        https = wait_for(lambda: re.search(r"HTTPS: listening on 127\.0\.0\.1:(\d+)", nsqd.log()), what="HTTPS")
        httpx.post(f"https://127.0.0.1:{https.group(1)}/topic/create", params={"topic": "secure"},
                   verify=certs.client_context()).raise_for_status()
        admin = AdminProcess(f"--nsqd-http-address={node}", f"--http-client-tls-root-ca-file={certs.ca_file}",
                             *recording(tmp_path / "stats"))
        time.sleep(0.5)
        assert admin.stop() == 0
    finally:
        nsqd.stop()
    rows = raw_rows(tmp_path / "stats")
    assert rows and all(not row["missing"] and row["node"] == node and row["topic"] == "secure" for row in rows)


class ForgetfulServer:
    """A real HTTP server on loopback that answers the first GET on a connection (keep-alive), then
    closes the connection when the next GET comes: nsqd closing an idle connection as a GET goes out."""

    def __init__(self, body: bytes):
        self.body = body
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.connections += 1
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                   % (len(self.body), self.body))
                connection.recv(65536)

    def close(self) -> None:
        self.sock.close()


def test_a_get_lost_with_its_keep_alive_connection_is_asked_again_on_a_new_one():
    """Each poll's GET on the kept connection is lost and asked again on a new one, within the poll;
    a node that refuses is its own error beside it."""
    server, closed = ForgetfulServer(b'{"topics": []}'), closed_port_address()

    async def three_polls() -> list[list]:
        fetcher = StatsFetcher(connect_timeout=2.0, request_timeout=5.0)
        try:
            return [await fetcher.get_all([server.address, closed], STATS_PATH) for _ in range(3)]
        finally:
            fetcher.close()

    try:
        polls = asyncio.run(three_polls())
    finally:
        server.close()
    assert [answers[0] for answers in polls] == [b'{"topics": []}'] * 3
    assert all(str(answers[1]).endswith(f"dial tcp {closed}: connect: connection refused") for answers in polls)
    assert server.connections == 3


def test_snapshots_are_written_within_an_interval_or_10_s_whatever_the_rollups(recorded, tmp_path):
    """flush_every is --stats-interval or MIN_FLUSH_SECONDS (10 s), the longer; with it shortened,
    files appear while the recorder runs, with no rollup scheduled."""
    cluster, _, _ = recorded
    assert (flush_seconds(0.1), flush_seconds(10.0), flush_seconds(30.0)) == (MIN_FLUSH_SECONDS, 10.0, 30.0)

    async def files_while_recording() -> int:
        admin = NSQAdmin(default_options(lookupd_http_address=[cluster.lookupd_http], stats_dir=str(tmp_path),
                                         stats_interval=0.1, rollup_interval=3600.0))
        assert admin.recorder.flush_every == MIN_FLUSH_SECONDS
        admin.recorder.flush_every = 0.3
        admin.recorder.start()
        await asyncio.sleep(1.2)
        files = len(visible_files(raw_dir(tmp_path)))
        await admin.recorder.stop()
        await admin.upstream.aclose()
        return files

    assert asyncio.run(files_while_recording()) >= 2


def test_stats_interval_0_records_nothing(tmp_path):
    admin = AdminProcess(f"--nsqd-http-address={closed_port_address()}", f"--stats-dir={tmp_path / 'stats'}",
                         "--stats-interval=0", "--rollup-interval=0")
    time.sleep(0.5)
    assert admin.stop() == 0
    assert not (tmp_path / "stats").exists()


def job_processes(pid: int) -> list[int]:
    """The processes of the worker's process group (the worker and its JVM) still alive."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while listed
            continue
        if int(fields[2]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def worker_pids(admin: AdminProcess) -> list[int]:
    return [int(pid) for pid in re.findall(r"rollup: the worker started \(pid (\d+)\)", admin.log())]


def test_the_rollup_worker_keeps_spark_warm_and_is_started_again_if_it_dies(recorded, tmp_path):
    """Two runs of one worker on one SparkSession; the worker killed, then started again after a
    backoff; stopped with nsqadmin, which exits 0 promptly and leaves no process behind."""
    cluster, _, _ = recorded
    admin = AdminProcess(f"--lookupd-http-address={cluster.lookupd_http}", *recording(tmp_path)[:2],
                         "--rollup-interval=2s", "--spark-master=local[1]")
    try:
        runs = r"rollup: read [1-9]\d* raw rows from \d+ files, wrote \d+ windows"
        wait_for(lambda: len(re.findall(runs, admin.log())) >= 2, timeout=180, what="two rollup runs")
        assert visible_files(rollups_dir(tmp_path) / "1m")
        assert len(re.findall(r"rollup: started Spark on local\[1\]", admin.log())) == 1
        first = worker_pids(admin)[0]
        os.killpg(first, 9)
        wait_for(lambda: "rollup: the worker exited with status -9" in admin.log(), timeout=10, what="the exit")
        second = wait_for(lambda: worker_pids(admin)[1:], timeout=10, what="a new worker")[0]
        wait_for(lambda: len(re.findall(runs, admin.log())) >= 3, timeout=180, what="a run of the new worker")
    finally:
        started = time.monotonic()
        assert admin.stop() == 0
    assert time.monotonic() - started < 15
    assert not job_processes(first) and not job_processes(second)
    log = admin.log()
    assert "Traceback" not in log, log[max(0, log.find("Traceback") - 3000):][:8000]
    assert "rollup: rollup:" not in log


def test_the_lookupds_are_asked_again_when_the_listing_is_old_or_a_node_failed(tmp_path):
    """A real nsqlookupd and two real nsqd: listed at the first poll, again at the second (the listing
    changed from none), then only once LISTING_SECONDS old; and at the poll after one where a node
    did not answer (nsqd b stopped), and the one after that (the listing changed). The polls' ticks
    are given, 10 s apart, so the test takes the time of its processes, not of LISTING_SECONDS."""
    lookupd = LookupdProcess("--broadcast-address=127.0.0.1")
    nsqds = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        nsqds.append(NsqdProcess(f"--data-path={tmp_path / name}", "--broadcast-address=127.0.0.1",
                                 f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}"))
    lookupd_http = f"http://127.0.0.1:{lookupd.http_port}"
    try:
        for nsqd in nsqds:
            assert httpx.post(f"http://127.0.0.1:{nsqd.http_port}/topic/create", params={"topic": "t"}).is_success
        wait_for(lambda: len(httpx.get(f"{lookupd_http}/nodes").json()["producers"]) == 2, what="2 nsqd registered")
        listings = asyncio.run(listings_at_each_poll(lookupd.http_port, nsqds[1], tmp_path / "stats"))
        written = raw_rows(tmp_path / "stats")
    finally:
        assert [nsqd.stop() for nsqd in nsqds] + [lookupd.stop()] == [0, 0, 0]
    assert listings == [1, 2, 2, 2, 3, 3, 4, 5, 5]
    a, b = (f"127.0.0.1:{nsqd.http_port}" for nsqd in nsqds)
    nodes_by_poll = [{(row["node"], row["missing"]) for row in written if ts_us(row) == ts}
                     for ts in sorted({ts_us(row) for row in written})]
    assert nodes_by_poll == [{(a, False), (b, False)}] * 5 + [{(a, False), (b, True)}] + [{(a, False)}] * 3


async def listings_at_each_poll(lookupd_port: int, nsqd_b: NsqdProcess, stats_dir: Path) -> list[int]:
    """How many times nsqadmin's recorder had listed the lookupd's nodes after each of 9 polls,
    nsqd b stopped (and so gone from the lookupd) after the fifth; the polls' rows flushed."""
    admin = NSQAdmin(default_options(lookupd_http_address=[f"127.0.0.1:{lookupd_port}"], stats_dir=str(stats_dir),
                                     stats_interval=10.0, rollup_interval=0.0))
    listings, asked = [], 0
    list_nodes = admin.ci.lookupd_producers

    async def counted_listing():
        nonlocal asked
        asked += 1
        return await list_nodes()

    admin.ci.lookupd_producers = counted_listing
    start = 1_700_000_000_000_000
    try:
        for seconds in range(0, 10 + LISTING_SECONDS + 1, 10):
            await admin.recorder.poll(start + seconds * 1_000_000)
            listings.append(asked)
        assert await asyncio.to_thread(nsqd_b.stop) == 0
        await asyncio.to_thread(wait_for, lambda: len(httpx.get(f"http://127.0.0.1:{lookupd_port}/nodes")
                                                      .json()["producers"]) == 1, what="nsqd b gone")
        for seconds in (50, 60, 70, 80):
            await admin.recorder.poll(start + seconds * 1_000_000)
            listings.append(asked)
    finally:
        await admin.recorder.stop()
        await admin.upstream.aclose()
    return listings


def test_a_killed_flushs_hidden_file_is_removed_once_stale(tmp_path):
    """Hidden raw files not written to for STALE_SECONDS are deleted when nsqadmin starts; a recent one
    (maybe another nsqadmin's, writing) is kept until it is stale too, seen again at a flush; the
    rollup job's own hidden files and finished files are never touched."""
    hour = raw_partition(tmp_path, datetime(2024, 1, 1, tzinfo=timezone.utc))
    hour.mkdir(parents=True)
    stale = hour / ".20240101T000000-0123abcd.parquet.4242.tmp"
    recent = hour / ".20240101T000010-89abcdef.parquet.7.tmp"
    compacting = hour / ".compacted-0123456789abcdef.parquet.4242.tmp"
    finished = hour / "20240101T000000-0123abcd.parquet"
    for path in (stale, recent, compacting, finished):
        path.write_bytes(b"PAR1")
    old = time.time() - STALE_SECONDS - 60
    for path in (stale, compacting, finished):
        os.utime(path, (old, old))
    admin = AdminProcess(f"--nsqd-http-address={closed_port_address()}", *recording(tmp_path))
    try:
        wait_for(lambda: not stale.exists(), what="the stale hidden file removed")
        assert recent.exists() and compacting.exists() and finished.exists()
        os.utime(recent, (old, old))
    finally:
        assert admin.stop() == 0  # its last flush looks at the recent file again
    assert not recent.exists() and compacting.exists() and finished.exists()
    assert admin.log().count("stats: removed ") == 2


# -- the raw writer against a real directory -------------------------------------------------


@pytest.fixture
def nsqadmin_log(caplog):
    """What the "nsqadmin" logger says (it may not propagate: serving/logs.py turns that off)."""
    logger = logging.getLogger("nsqadmin")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="nsqadmin")
    yield caplog
    logger.removeHandler(caplog.handler)


def poll_of(ts_us: int, *nodes: str) -> PollRows:
    rows = PollRows(ts_us)
    for node in nodes:
        rows.add_missing(node)
    return rows


def test_a_failed_write_keeps_the_rows_for_the_next_flush(tmp_path, nsqadmin_log):
    async def scenario():
        writer = RawWriter(tmp_path)
        raw_dir(tmp_path).write_text("in the way")  # a file where the raw directory must be
        writer.append(1_700_000_000_000_000, poll_of(1_700_000_000_000_000, "a:1", "b:2").table())
        await writer.flush()
        assert writer.rows == 2 and not hidden_files(tmp_path)
        raw_dir(tmp_path).unlink()
        writer.append(1_700_000_010_000_000, poll_of(1_700_000_010_000_000, "a:1").table())
        await writer.flush()
        assert writer.rows == 0

    asyncio.run(scenario())
    assert re.search(r"stats: cannot write 2 rows to \S+ - not a directory; keeping them for the next flush",
                     nsqadmin_log.text)
    assert sorted(row["node"] for row in raw_rows(tmp_path)) == ["a:1", "a:1", "b:2"]
    assert len(visible_files(raw_dir(tmp_path))) == 1


def test_rows_that_cannot_be_written_are_bounded_oldest_dropped_first(tmp_path, nsqadmin_log):
    async def scenario():
        writer = RawWriter(tmp_path, keep_rows=3)
        raw_dir(tmp_path).write_text("in the way")
        for n in range(4):
            writer.append(1_700_000_000_000_000 + n, poll_of(1_700_000_000_000_000 + n, f"n{n}:1").table())
            await writer.flush()
        raw_dir(tmp_path).unlink()
        await writer.flush()

    asyncio.run(scenario())
    assert sorted(row["node"] for row in raw_rows(tmp_path)) == ["n1:1", "n2:1", "n3:1"]
    assert "stats: 4 unwritten rows are more than 3; dropped the oldest 1" in nsqadmin_log.text


def test_a_flush_spanning_two_hours_writes_a_file_in_each(tmp_path):
    before, after = 1_700_002_799_800_000, 1_700_002_800_000_000  # 22:59:59.8 and 23:00:00 UTC
    writer = RawWriter(tmp_path)
    writer.append(before, poll_of(before, "a:1").table())
    writer.append(after, poll_of(after, "a:1").table())
    asyncio.run(writer.flush())
    files = visible_files(raw_dir(tmp_path))
    assert [f"{p.parent.parent.name}/{p.parent.name}/{p.name[:15]}" for p in files] == \
        ["date=2023-11-14/hour=22/20231114T225959", "date=2023-11-14/hour=23/20231114T230000"]


@pytest.mark.parametrize("quantile, text", [(0.99, "0.99"), (1.0, "1"), (0.5, "0.5"), (0.999, "0.999"),
                                            (1e-05, "1e-05"), (0.0001, "0.0001"), (1234567.0, "1.234567e+06")])
def test_quantiles_are_keyed_as_gos_percent_v_prints_them(quantile, text):
    assert go_float_text(quantile) == text


def test_the_table_of_a_poll_follows_the_contract():
    table = poll_of(1_700_000_000_000_000, "a:1").table()
    assert table.schema == RAW_SCHEMA and table.column("e2e_ns").null_count == 1
