"""The rollup benchmark's snapshot generator: layout, schema, NSQ-like counters, and the appended minute."""

import subprocess
import sys
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from bench.history_data import START, ClusterShape, append_minute, generate
from nsqadmin.history import compaction, layout

from .helpers import ROOT

SHAPE = ClusterShape(nodes=2, channels=4, topics=2)
SERIES_ORDER = [(column, "ascending") for column in ("node", "topic", "channel", "ts")]


def series(table, node: str, topic: str, channel: str):
    return table.filter(pc.and_(pc.and_(pc.equal(table["node"], node), pc.equal(table["topic"], topic)),
                                pc.equal(table["channel"], channel)))


@pytest.fixture
def stats_dir(tmp_path):
    assert generate(tmp_path, SHAPE, hours=2) == SHAPE.rows(2) == 2 * 360 * 2 * 6
    return tmp_path


def test_one_file_an_hour_in_the_raw_layout_as_compaction_writes_it(stats_dir):
    files = layout.visible_files(layout.raw_dir(stats_dir))
    assert [path.parent for path in files] == [layout.raw_partition(stats_dir, START + timedelta(hours=hour))
                                               for hour in range(2)]
    for path in files:
        table = pq.read_table(path)
        assert table.schema == layout.RAW_SCHEMA
        assert table.num_rows == 360 * SHAPE.rows_per_snapshot
        metadata = pq.ParquetFile(path).metadata
        assert metadata.num_row_groups == 60 // compaction.ROW_GROUP_MINUTES
        for group in range(metadata.num_row_groups):
            rows = pq.ParquetFile(path).read_row_group(group)
            assert rows.equals(rows.sort_by(compaction.SERIES_ORDER))
            assert len(set(pc.floor_temporal(rows["ts"], compaction.ROW_GROUP_MINUTES, "minute").to_pylist())) == 1
        assert not pc.any(table["missing"]).as_py()


def test_flushes_are_a_file_a_minute_in_poll_order_with_the_same_snapshots(stats_dir, tmp_path):
    flushed = tmp_path / "flushed"
    assert generate(flushed, SHAPE, hours=2, flushes=True) == SHAPE.rows(2)
    files = layout.visible_files(layout.raw_dir(flushed))
    assert len(files) == 2 * 60
    for minute, path in enumerate(files):
        table = pq.read_table(path)
        assert table.schema == layout.RAW_SCHEMA
        times = table["ts"].to_pylist()
        assert times == sorted(times) and times[0] == START + timedelta(minutes=minute)
        assert len(set(times)) == 6 and table.num_rows == 6 * SHAPE.rows_per_snapshot
    keys = ["ts", "node", "topic", "channel"]
    assert pq.read_table(layout.raw_dir(flushed), columns=keys).sort_by(SERIES_ORDER).equals(
        pq.read_table(layout.raw_dir(stats_dir), columns=keys).sort_by(SERIES_ORDER))


def test_channels_count_every_message_of_their_topic(stats_dir):
    table = pq.read_table(layout.raw_dir(stats_dir))
    topic = series(table, "nsqd-1:4151", "topic-1", "")["message_count"]
    for channel in ("channel-1", "channel-3"):
        assert series(table, "nsqd-1:4151", "topic-1", channel)["message_count"].equals(topic)
    assert pc.sum(series(table, "nsqd-1:4151", "topic-1", "")["depth"]).as_py() == 0


def test_counters_grow_and_restart_with_nsqd(stats_dir):
    table = pq.read_table(layout.raw_dir(stats_dir)).sort_by(SERIES_ORDER)
    counts = series(table, "nsqd-0:4151", "topic-0", "channel-0")["message_count"].to_pylist()
    drops = [index for index, (before, after) in enumerate(zip(counts, counts[1:])) if after < before]
    assert drops == [179]  # node 0 restarts at 00:30, the 181st snapshot
    steady = series(table, "nsqd-1:4151", "topic-0", "channel-0")["message_count"].to_pylist()
    assert steady == sorted(steady) and steady[-1] > steady[0]


def test_appended_minute_continues_every_series(stats_dir):
    path, rows = append_minute(stats_dir)
    assert rows == 6 * SHAPE.rows_per_snapshot
    assert path.parent == layout.raw_partition(stats_dir, START + timedelta(hours=2))
    minute = pq.read_table(path)
    assert minute.schema == layout.RAW_SCHEMA
    assert pc.min(minute["ts"]).as_py() == START + timedelta(hours=2)
    before = pq.read_table(layout.raw_dir(stats_dir) / "date=2026-01-01" / "hour=01")
    last = before.filter(pc.equal(before["ts"], pc.max(before["ts"]))).sort_by(SERIES_ORDER)
    first = minute.filter(pc.equal(minute["ts"], pc.min(minute["ts"]))).sort_by(SERIES_ORDER)
    assert first["node"].equals(last["node"]) and first["channel"].equals(last["channel"])
    growth = pc.subtract(first["message_count"], last["message_count"])
    assert pc.min(growth).as_py() >= 0 and pc.max(growth).as_py() > 0
    second, _ = append_minute(stats_dir)
    assert pc.min(pq.read_table(second)["ts"]).as_py() == START + timedelta(hours=2, minutes=1)


def test_generating_into_a_directory_with_snapshots_is_refused(stats_dir):
    with pytest.raises(ValueError, match="already holds snapshots"):
        generate(stats_dir, SHAPE, hours=1)


def test_appending_needs_snapshots(tmp_path):
    with pytest.raises(ValueError, match="holds no snapshots to continue"):
        append_minute(tmp_path)


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "history_data.py"), *args],
                          capture_output=True, text=True, timeout=60)


def test_command_line(tmp_path):
    made = run_script("--out", str(tmp_path), "--nodes", "1", "--channels", "2", "--topics", "1", "--hours", "1")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("wrote 1,080 rows in 1 files")
    flushed = run_script("--out", str(tmp_path / "flushed"), "--nodes", "1", "--channels", "2", "--topics", "1",
                         "--hours", "1", "--flushes")
    assert flushed.returncode == 0, flushed.stderr
    assert flushed.stdout.startswith("wrote 1,080 rows in 60 files")
    appended = run_script("--out", str(tmp_path), "--append-minute")
    assert appended.returncode == 0, appended.stderr
    assert appended.stdout.startswith("appended 18 rows")


@pytest.mark.parametrize("args, status, message", [
    (["--topics", "3", "--channels", "2"], 2, "--topics (3) must not exceed --channels (2)"),
    (["--hours", "0"], 2, "argument --hours: must be 1 or more, not 0"),
    (["--append-minute"], 1, "holds no snapshots to continue: generate them first"),
])
def test_command_line_errors(tmp_path, args, status, message):
    failed = run_script("--out", str(tmp_path), *args)
    assert failed.returncode == status
    assert message in failed.stderr and "Traceback" not in failed.stderr


def test_appending_to_snapshots_of_another_shape_is_refused(stats_dir):
    hour = pq.read_table(layout.raw_dir(stats_dir) / "date=2026-01-01" / "hour=01")
    stranger = hour.slice(hour.num_rows - 1).set_column(1, "node", pa.array(["elsewhere:4151"]))
    pq.write_table(stranger, layout.raw_dir(stats_dir) / "date=2026-01-01" / "hour=01" / "stranger.parquet")
    with pytest.raises(ValueError, match="does not hold a data set this generator made: its nodes differ"):
        append_minute(stats_dir)
