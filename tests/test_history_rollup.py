"""The PySpark rollup job on snapshots with known answers, on one real local SparkSession: exact
messages, rates and depth statistics at every level and across nodes, a counter reset, a node that
went missing, a late file, incremental runs equal to a full run, compaction (also interrupted),
retention, and the nsqadmin-rollup command."""

import logging
import shutil
import subprocess
import sys
from datetime import timedelta
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nsqadmin.history import layout
from nsqadmin.history.rollup_job import COARSER_EVERY, run_rollup
from nsqadmin.history import rollup_main
from nsqadmin.history.rollup_main import coarser_wait
from nsqadmin.history.rollup_state import load_state, raw_files

from .helpers import ROOT
from .history_raw import T0, copy_raw, missing, rollups, snapshot, utc, window, write_raw
from .spark_fixtures import spark  # noqa: F401

A, B = "10.0.0.1:4151", "10.0.0.2:4151"
NOW = utc(T0 + 1800)


def traffic(node: str, share: int, ticks: range, topic: str = "orders", channel: str = "billing") -> list[dict]:
    """Snapshots every 10 s: ``10 * share`` messages and ``share`` requeue per snapshot, depth cycling
    0, 10, ..., 50 (times ``share``) within each minute, 3 * share in flight, 2 clients."""
    return [snapshot(T0 + 10 * i, node, topic, channel, messages=10 * share * i, requeues=share * i,
                     depth=10 * share * (i % 6), in_flight=3 * share, clients=2,
                     e2e_p99=1000.0 * i if node == A else None) for i in ticks]


def roll_up(spark, stats_dir, now=NOW, **options):
    return run_rollup(stats_dir, lambda raw_bytes: spark(raw_bytes), now=now, **options)


def normalised(rows: list[dict]) -> list[dict]:
    """Rows with floats rounded, so sums taken in another order compare equal."""
    return [{key: round(value, 9) if isinstance(value, float) else value for key, value in row.items()}
            for row in rows]


def test_exact_messages_rates_and_depths_per_node_across_nodes_and_per_level(spark, tmp_path):
    write_raw(tmp_path, traffic(A, 1, range(18)) + traffic(B, 2, range(18)))
    summary = roll_up(spark, tmp_path)
    assert summary.raw_rows == 36 and summary.windows == {"1m": 9, "1h": 3, "1d": 3}
    minutes = rollups(tmp_path, "1m")
    first = window(minutes, A, "orders", "billing", T0)
    assert (first["samples"], first["messages"], first["covered_seconds"], first["rate"]) == (6, 50, 50.0, 1.0)
    second = window(minutes, A, "orders", "billing", T0 + 60)
    assert {key: second[key] for key in ("samples", "messages", "covered_seconds", "rate", "requeues", "timeouts",
                                         "depth_max", "depth_avg", "depth_p95", "depth_last", "in_flight_max",
                                         "clients_max", "e2e_p99_max", "finished", "paused_last")} == {
        "samples": 6, "messages": 60, "covered_seconds": 60.0, "rate": 1.0, "requeues": 6, "timeouts": 0,
        "depth_max": 50, "depth_avg": 25.0, "depth_p95": 47.5, "depth_last": 50, "in_flight_max": 3,
        "clients_max": 2, "e2e_p99_max": 11000.0, "finished": 60, "paused_last": False}
    both = window(minutes, layout.ALL_NODES, "orders", "billing", T0 + 60)
    assert {key: both[key] for key in ("messages", "covered_seconds", "rate", "depth_max", "depth_avg", "depth_p95",
                                       "depth_last", "in_flight_max", "clients_max", "e2e_p99_max")} == {
        "messages": 180, "covered_seconds": 60.0, "rate": 3.0, "depth_max": 150, "depth_avg": 75.0,
        "depth_p95": 142.5, "depth_last": 150, "in_flight_max": 9, "clients_max": 4, "e2e_p99_max": 11000.0}
    for level, start in (("1h", T0), ("1d", T0 // 86400 * 86400)):
        row = window(rollups(tmp_path, level), A, "orders", "billing", start)
        assert (row["samples"], row["messages"], row["covered_seconds"], row["rate"]) == (18, 170, 170.0, 1.0)
        assert (row["depth_max"], row["depth_avg"], row["depth_p95"], row["requeues"]) == (50, 25.0, 25.0, 17)
        assert window(rollups(tmp_path, level), layout.ALL_NODES, "orders", "billing", start)["messages"] == 510


def test_a_counter_reset_counts_the_messages_since_the_restart(spark, tmp_path):
    counts = [100, 110, 120, 5, 15, 25]
    write_raw(tmp_path, [snapshot(T0 + 10 * i, A, "orders", "billing", messages=count)
                         for i, count in enumerate(counts)])
    roll_up(spark, tmp_path)
    minute = window(rollups(tmp_path, "1m"), A, "orders", "billing", T0)
    assert (minute["messages"], minute["covered_seconds"], minute["rate"]) == (45, 50.0, 0.9)


def test_a_missing_node_leaves_no_zeros_and_its_messages_arrive_with_it(spark, tmp_path):
    rows = [snapshot(T0 + 10 * i, A, "orders", "billing", messages=10 * i, depth=7) for i in (0, 1, 2)]
    rows += [missing(T0 + 10 * i, A) for i in (3, 4, 5)]
    rows += [snapshot(T0 + 10 * i, A, "orders", "billing", messages=10 * i, depth=7) for i in range(6, 12)]
    write_raw(tmp_path, rows)
    roll_up(spark, tmp_path)
    minutes = rollups(tmp_path, "1m")
    gap = window(minutes, A, "orders", "billing", T0)
    assert (gap["samples"], gap["messages"], gap["covered_seconds"], gap["depth_avg"]) == (3, 20, 20.0, 7.0)
    back = window(minutes, A, "orders", "billing", T0 + 60)
    assert (back["samples"], back["messages"], back["covered_seconds"], back["rate"]) == (6, 90, 90.0, 1.0)
    assert {row["node"] for row in minutes} == {A, layout.ALL_NODES}


def test_incremental_runs_and_a_late_file_give_what_one_full_run_gives(spark, tmp_path):
    incremental, full = tmp_path / "incremental", tmp_path / "full"
    batches = [traffic(A, 1, range(6)) + traffic(B, 2, range(6)),
               traffic(A, 1, range(6, 18)) + traffic(A, 1, range(6), "clicks", ""),
               traffic(B, 2, range(6, 18)),  # late: minutes already rolled up for node A
               traffic(A, 1, range(18, 24)) + traffic(B, 2, range(18, 24))]
    for batch in batches:
        write_raw(incremental, batch)
        roll_up(spark, incremental)
    late_minute = window(rollups(incremental, "1m"), layout.ALL_NODES, "orders", "billing", T0 + 60)
    assert late_minute["messages"] == 180
    copy_raw(incremental, full)
    roll_up(spark, full)
    for level in layout.WINDOWS:
        assert normalised(rollups(incremental, level)) == normalised(rollups(full, level)), level
    for stats_dir in (incremental, full):
        assert load_state(stats_dir).seen == set(raw_files(stats_dir))


def test_a_run_whose_jvm_went_first_fails_quietly_even_if_spark_cannot_be_stopped(monkeypatch, tmp_path, caplog):
    """A hog run's failure: at nsqadmin's stop its SIGTERM reached the worker's JVM first, the run
    failed in py4j, and stopping Spark after it raised again, out of the worker with a traceback."""
    from py4j.protocol import Py4JNetworkError

    def gone(*args, **kwargs):
        raise Py4JNetworkError("Answer from Java side is empty")

    class GoneSession:
        stopped = 0

        def stop(self):
            self.stopped += 1
            gone()

    monkeypatch.setattr(rollup_main, "run_rollup", gone)
    session, log = GoneSession(), logging.getLogger("test-rollup-worker")
    with caplog.at_level(logging.DEBUG, logger=log.name):
        assert rollup_main._run_once(SimpleNamespace(stats_dir=tmp_path, stats_retention=60), session,
                                     log) is False
    assert session.stopped == 1
    assert "Spark failed: Answer from Java side is empty" in caplog.text


PY4J_FAILED_CALL = """
import logging, sys
from nsqadmin.history.rollup_main import job_logger
job_logger(sys.argv[1])
try:
    raise ConnectionResetError("the JVM went away")
except ConnectionResetError:
    logging.exception("Exception while sending command.")  # what py4j's GatewayClient.send_command does
"""


@pytest.mark.parametrize("level", ["info", "debug"])
def test_py4j_reporting_a_call_the_jvm_did_not_answer_is_a_debug_line_not_a_traceback(level):
    """A hog run's failure: the worker's JVM ended first at nsqadmin's stop, py4j reported the
    call it was in with logging.exception on the root logger, and its traceback reached nsqadmin's
    log. In a process of its own: pytest's handlers on the root logger would hide the default."""
    done = subprocess.run([sys.executable, "-c", PY4J_FAILED_CALL, level], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    if level == "info":
        assert done.stderr == ""
    else:
        assert "DEBUG: root: Exception while sending command." in done.stderr
        assert "ConnectionResetError: the JVM went away" in done.stderr
        assert all(line.startswith(("[nsqadmin-rollup] ", "Traceback", "  ", "ConnectionResetError"))
                   for line in done.stderr.splitlines()), done.stderr


@pytest.mark.parametrize("interval, runs", [(300.0, 2), (60.0, 10), (1.0, 10), (3600.0, 1)])
def test_the_workers_hours_and_days_are_due_at_their_run_whatever_its_clock_jitter(interval, runs):
    """The worker's runs read the time as they start, a few milliseconds either side of their
    tick: the 1h and 1d windows are due at the run COARSER_RUNS intervals (at most 10 minutes)
    after the one that made them stale, not one interval later (with the default 5 minutes, the
    worker measured from outside waited 15)."""
    wait = coarser_wait(interval)
    due_after = timedelta(seconds=interval * runs)
    for jitter in (-0.05, 0.0, 0.05):
        assert wait <= due_after + timedelta(seconds=jitter)  # due at that run...
        assert runs == 1 or wait > due_after - timedelta(seconds=interval) + timedelta(seconds=jitter)  # ...not before
    assert due_after <= max(COARSER_EVERY, timedelta(seconds=interval))


def test_the_workers_hours_and_days_follow_their_minutes_within_ten_minutes_or_when_the_hour_closes(spark, tmp_path):
    """As nsqadmin's worker runs the job (coarser_every): one-minute runs write the open hour's
    minutes only; a run 10 minutes after the first (new files or not) or after the hour closed
    writes its hour and day, the same as a run over everything."""
    worker = {"coarser_every": timedelta(minutes=10)}
    full = tmp_path / "full"

    def same_as_a_full_run(now):
        copy_raw(tmp_path / "worker", full)
        roll_up(spark, full, now=now)
        for level in layout.WINDOWS:
            assert normalised(rollups(tmp_path / "worker", level)) == normalised(rollups(full, level)), level

    stats_dir = tmp_path / "worker"
    for ticks, now in ((range(6), T0 + 70), (range(6, 12), T0 + 130)):
        write_raw(stats_dir, traffic(A, 1, ticks))
        summary = roll_up(spark, stats_dir, now=utc(now), **worker)
        assert summary.windows == {"1m": summary.windows["1m"], "1h": 0, "1d": 0} and summary.windows["1m"] > 0
    assert rollups(stats_dir, "1h") == rollups(stats_dir, "1d") == []
    assert utc(T0) in load_state(stats_dir).stale_hours
    assert roll_up(spark, stats_dir, now=utc(T0 + 70 + 599), **worker).windows["1h"] == 0
    summary = roll_up(spark, stats_dir, now=utc(T0 + 70 + 600), **worker)  # nothing new: the hour is due
    assert summary.windows["1h"] == 2 and load_state(stats_dir).stale_hours == set()
    same_as_a_full_run(utc(T0 + 70 + 600))
    write_raw(stats_dir, traffic(A, 1, range(12, 18)))
    assert roll_up(spark, stats_dir, now=utc(T0 + 800), **worker).windows["1h"] == 0
    shutil.rmtree(full)
    summary = roll_up(spark, stats_dir, now=utc(T0 + 3600), **worker)  # the hour closed
    assert summary.windows["1h"] == 2
    same_as_a_full_run(utc(T0 + 3600))


def test_compaction_merges_a_closed_hour_and_later_runs_stay_exact(spark, tmp_path):
    for ticks in (range(6), range(6, 12), range(12, 18)):
        write_raw(tmp_path, traffic(A, 1, ticks))
        roll_up(spark, tmp_path)
    before = rollups(tmp_path, "1m")
    hour_dir = layout.raw_partition(tmp_path, utc(T0))
    roll_up(spark, tmp_path, now=utc(T0 + 2 * 3600))
    merged = layout.visible_files(hour_dir)
    assert len(merged) == 1 and pq.read_table(merged[0]).num_rows == 18
    assert load_state(tmp_path).seen == {str(merged[0].relative_to(layout.raw_dir(tmp_path)))}
    assert rollups(tmp_path, "1m") == before
    write_raw(tmp_path, [snapshot(T0 + 180 + 10 * i, A, "orders", "billing", messages=10 * (18 + i),
                                  requeues=18 + i) for i in range(6)])
    roll_up(spark, tmp_path, now=utc(T0 + 2 * 3600))
    full = tmp_path / "full"
    copy_raw(tmp_path, full)
    roll_up(spark, full, now=utc(T0 + 2 * 3600))
    assert normalised(rollups(tmp_path, "1h")) == normalised(rollups(full, "1h"))
    assert window(rollups(tmp_path, "1h"), A, "orders", "billing", T0)["messages"] == 230


def test_an_interrupted_compaction_is_finished_without_counting_twice(spark, tmp_path):
    for ticks in (range(6), range(6, 12)):
        write_raw(tmp_path, traffic(A, 1, ticks))
        roll_up(spark, tmp_path)
    before = rollups(tmp_path, "1h")
    hour_dir = layout.raw_partition(tmp_path, utc(T0))
    names = [path.name for path in layout.visible_files(hour_dir)]
    merged = pa.concat_tables([pq.read_table(hour_dir / name) for name in names])
    pq.write_table(merged, hour_dir / "compacted-crashed.parquet")  # published, then the run died
    state_path = layout.rollups_dir(tmp_path) / layout.STATE_FILE
    state = load_state(tmp_path)
    layout.write_json(state_path, {"seen": sorted(state.seen), "compacting": {
        "dir": hour_dir.name and str(hour_dir.relative_to(layout.raw_dir(tmp_path))),
        "file": "compacted-crashed.parquet", "replaces": names}})
    summary = roll_up(spark, tmp_path)
    assert summary.raw_rows == 0
    assert [path.name for path in layout.visible_files(hour_dir)] == ["compacted-crashed.parquet"]
    assert load_state(tmp_path).compacting is None
    assert rollups(tmp_path, "1h") == before


def test_hours_are_merged_side_by_side_and_a_dead_run_leaves_no_merged_file_behind(spark, tmp_path):
    for ticks in (range(0, 240), range(240, 480), range(480, 720)):  # two files in each of two hours
        write_raw(tmp_path, traffic(A, 1, ticks))
        roll_up(spark, tmp_path)
    before = rollups(tmp_path, "1h")
    hour_dirs = [layout.raw_partition(tmp_path, utc(T0 + 3600 * hour)) for hour in range(2)]
    dead = hour_dirs[0] / ".compacted-0123456789abcdef.parquet.999999.tmp"  # a run died while merging
    dead.write_bytes(b"PAR1")
    roll_up(spark, tmp_path, now=utc(T0 + 3 * 3600))
    assert not dead.exists()
    merged = [layout.visible_files(directory) for directory in hour_dirs]
    assert [len(files) for files in merged] == [1, 1]
    assert [pq.read_table(files[0]).num_rows for files in merged] == [360, 360]
    assert load_state(tmp_path).seen == {str(files[0].relative_to(layout.raw_dir(tmp_path))) for files in merged}
    assert [path for path in layout.raw_dir(tmp_path).rglob("*") if path.name.startswith(".")] == []
    assert rollups(tmp_path, "1h") == before


def test_retention_deletes_old_raw_hours_and_rollups(spark, tmp_path):
    write_raw(tmp_path, traffic(A, 1, range(12)))
    roll_up(spark, tmp_path)
    assert rollups(tmp_path, "1d")
    roll_up(spark, tmp_path, now=utc(T0 + 40 * 86400), retention=timedelta(days=7))
    assert layout.visible_files(layout.raw_dir(tmp_path)) == []
    assert all(rollups(tmp_path, level) == [] for level in ("1m", "1h", "1d"))
    assert load_state(tmp_path).seen == set()


def rollup_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsqadmin.history.rollup_main", *args],
                          capture_output=True, text=True, timeout=180)


def test_the_command_rolls_up_once_and_exits_0(tmp_path):
    write_raw(tmp_path, traffic(A, 1, range(12)))
    done = rollup_command(f"--stats-dir={tmp_path}", "--spark-master=local[1]", "--stats-retention=87600h")
    assert done.returncode == 0, done.stderr
    assert "read 12 raw rows from 1 files, wrote" in done.stderr
    assert window(rollups(tmp_path, "1m"), A, "orders", "billing", T0 + 60)["messages"] == 60


@pytest.mark.parametrize("args, message", [
    (["--stats-dir=/nonexistent/stats"], "/nonexistent/stats"),
    (["--stats-dir=.", "--spark-master=yarn"], "--spark-master"),
    (["--stats-dir=.", "--bogus"], "flag provided but not defined: -bogus"),
])
def test_the_command_refuses_bad_flags_with_a_message(args, message):
    done = rollup_command(*args)
    assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr


def test_the_small_files_of_a_closed_block_are_merged_new_and_rolled_up_apart(spark, tmp_path):
    """A file every 10 s, as the recorder writes them: before rolling up, the new files of each
    closed ten-minute block become one; files rolled up before are merged only with each other."""
    hour_dir = layout.raw_partition(tmp_path, utc(T0))
    now = utc(T0 + 1800)
    for tick in range(12):
        write_raw(tmp_path, traffic(A, 1, range(tick, tick + 1)))
    summary = roll_up(spark, tmp_path, now=now)
    assert summary.files == 1 and summary.raw_rows == 12
    assert len(layout.visible_files(hour_dir)) == 1
    for tick in range(12, 18):
        write_raw(tmp_path, traffic(A, 1, range(tick, tick + 1)))
    assert (roll_up(spark, tmp_path, now=now).files, len(layout.visible_files(hour_dir))) == (2, 2)
    roll_up(spark, tmp_path, now=now)
    merged = layout.visible_files(hour_dir)
    assert len(merged) == 1 and pq.read_table(merged[0]).num_rows == 18
    assert load_state(tmp_path).seen == {str(merged[0].relative_to(layout.raw_dir(tmp_path)))}
    full = tmp_path / "full"
    copy_raw(tmp_path, full)
    roll_up(spark, full, now=now)
    for level in layout.WINDOWS:
        assert normalised(rollups(tmp_path, level)) == normalised(rollups(full, level)), level
