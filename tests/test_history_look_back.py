"""The rollup job's driver-side pieces: each series' last snapshot before a rewritten span
(look_back.py, pyarrow alone) and the column expressions kept per SparkContext (column_cache.py)."""

from pyspark import SparkContext

from nsqadmin.history import column_cache
from nsqadmin.history.look_back import SCHEMA, last_snapshots
from nsqadmin.history.series_ids import named_keys, series_names

from .history_raw import missing, snapshot, utc, write_raw
from .spark_fixtures import spark  # noqa: F401

T0 = 1_767_225_600  # 2026-01-01 00:00 UTC
MINUTE = 60


def span(start_minute: int, end_minute: int):
    return utc(T0 + start_minute * MINUTE), utc(T0 + end_minute * MINUTE)


def test_each_series_last_snapshot_before_each_span_with_its_values_and_keys(tmp_path):
    """Two spans: a series' last row before each within the look-back, counters and backlog
    as the deltas need them, a null start_time kept as the last row has it, missing-node rows
    and rows inside the spans or before the look-back left out."""
    rows = [
        snapshot(T0 + 10, "a", "t", "c", messages=1, depth=1),  # before span 1's look-back
        snapshot(T0 + 20 * MINUTE, "a", "t", "c", messages=5, depth=2, in_flight=3, deferred=4),
        {**snapshot(T0 + 21 * MINUTE, "a", "t", "c", messages=7, requeues=2, timeouts=1, depth=1),
         "start_time": None},
        snapshot(T0 + 22 * MINUTE, "b", "t", "c", messages=9),
        missing(T0 + 22 * MINUTE + 10, "a"),
        snapshot(T0 + 30 * MINUTE, "a", "t", "c", messages=100),  # in span 1
        snapshot(T0 + 50 * MINUTE, "a", "t", "c", messages=200, depth=6),  # span 2's look-back
        snapshot(T0 + 61 * MINUTE, "a", "t", "c", messages=300),  # in span 2
    ]
    for row in rows[1:2] + rows[3:4]:
        row["start_time"] = T0 - 3600
    paths = write_raw(tmp_path, rows)
    keys, _ = named_keys(series_names(paths))
    key = {(row["node"], row["topic"], row["channel"]): row for row in keys.to_pylist()}
    table = last_snapshots(paths, [span(25, 40), span(60, 75)], keys)

    assert table.schema == SCHEMA
    got = sorted(table.to_pylist(), key=lambda row: row["ts_us"])
    assert [(row["sid"], row["ts_us"] // 1_000_000 - T0) for row in got] == [
        (key["a", "t", "c"]["key"], 21 * MINUTE), (key["b", "t", "c"]["key"], 22 * MINUTE),
        (key["a", "t", "c"]["key"], 50 * MINUTE)]
    first = got[0]
    assert (first["message_count"], first["requeue_count"], first["timeout_count"], first["backlog"]) == (7, 2, 1, 1)
    assert first["start_time"] is None and got[1]["start_time"] == T0 - 3600
    assert first["all_key"] == key["*", "t", "c"]["key"]
    assert first["minute_us"] == (T0 + 21 * MINUTE) * 1_000_000
    assert (first["depth"], first["in_flight"], first["client_count"], first["paused"], first["e2e_p99"]) == (
        0, 0, 0, False, None)
    assert got[2]["backlog"] == 6


def test_no_snapshot_in_the_look_back_gives_an_empty_table_of_the_same_columns(tmp_path):
    paths = write_raw(tmp_path, [snapshot(T0 + 30 * MINUTE, "a", "t", "c", messages=1)])
    keys, _ = named_keys(series_names(paths))
    table = last_snapshots(paths, [span(30, 46)], keys)
    assert table.num_rows == 0 and table.schema == SCHEMA


def test_columns_are_built_once_per_spark_context_and_every_time_without_one(spark, monkeypatch):  # noqa: F811
    built = []

    @column_cache.per_context
    def columns(name):
        built.append(name)
        return [name]

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    assert columns("x") == columns("x") == ["x"] and built == ["x", "x"]
    monkeypatch.undo()
    spark(0)
    first = columns("x")
    assert columns("x") is first and columns("y") == ["y"] and built == ["x", "x", "x", "y"]
