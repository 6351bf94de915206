"""The rollup reader behind /api/rollups and the pages' charts, on rollup files written by hand."""

from datetime import timedelta

import pytest

from nsqadmin.history import layout
from nsqadmin.history.reader import History

from .history_rows import utc, window_row, write_rollups

T0 = 1_795_075_200  # 2026-11-19 08:00:00 UTC, an hour boundary


@pytest.fixture
def history(tmp_path):
    rows = []
    for minute in range(90):  # 08:00 to 09:29: two hour partitions
        ts = T0 + 60 * minute
        for node, share in (("10.0.0.1:4151", 1), ("10.0.0.2:4151", 2)):
            rows.append(window_row(ts, "orders", node=node, messages=60 * share, rate=float(share)))
            rows.append(window_row(ts, "orders", "billing", node=node, messages=60 * share, rate=float(share),
                                   depth_max=minute * share, in_flight_max=share))
        rows.append(window_row(ts, "orders", messages=180, rate=3.0))
        rows.append(window_row(ts, "orders", "billing", messages=180, rate=3.0, depth_max=3 * minute,
                               in_flight_max=3, depth_avg=2.5 * minute))
        rows.append(window_row(ts, "clicks", "ads", messages=60, rate=1.0))
    write_rollups(tmp_path, "1m", rows)
    return History(tmp_path)


def test_series_across_nodes_oldest_first_in_api_shape(history):
    series = history.series("1m", "orders", "billing")
    assert len(series) == 90
    assert [point["ts"] for point in series] == [T0 + 60 * m for m in range(90)]
    assert list(series[0]) == ["ts", "messages", "rate", "depth_max", "depth_avg", "depth_p95", "in_flight_max",
                               "requeues", "timeouts", "clients_max", "finished", "e2e_p99_max"]
    assert series[10] == {"ts": T0 + 600, "messages": 180, "rate": 3.0, "depth_max": 30, "depth_avg": 25.0,
                          "depth_p95": 0.0, "in_flight_max": 3, "requeues": 0, "timeouts": 0, "clients_max": 0,
                          "finished": 0, "e2e_p99_max": None}


def test_series_of_one_node_and_of_a_topic(history):
    node = history.series("1m", "orders", "billing", node="10.0.0.2:4151")
    assert {point["rate"] for point in node} == {2.0} and node[5]["depth_max"] == 10
    topic = history.series("1m", "orders")
    assert len(topic) == 90 and {point["messages"] for point in topic} == {180}


def test_since_keeps_later_windows_and_skips_earlier_partitions(history, tmp_path):
    since = utc(T0 + 3600 + 60 * 20)
    series = history.series("1m", "orders", "billing", since=since)
    assert [point["ts"] for point in series] == [T0 + 3600 + 60 * m for m in range(20, 30)]
    first_hour = layout.rollup_partition(tmp_path, "1m", utc(T0))
    first_hour.write_bytes(b"not parquet")  # never opened: it ends before `since`
    assert history.series("1m", "orders", "billing", since=since) == series


def test_unknown_series_and_empty_directory_give_no_windows(history, tmp_path):
    assert history.series("1m", "orders", "nope") == []
    assert history.series("1h", "orders", "billing") == []
    assert History(tmp_path / "never-written").series("1m", "orders") == []


def test_node_totals_add_the_topic_rate_and_every_depth(history):
    totals = history.node_series("1m", "10.0.0.2:4151", since=utc(T0 + 60 * 30))
    assert totals[0] == {"ts": T0 + 1800, "messages": 120, "rate": 2.0, "depth_max": 60, "in_flight_max": 2}


def test_cluster_totals_add_every_channel_across_nodes(history):
    totals = history.cluster_series("1m")
    assert totals[30] == {"ts": T0 + 1800, "messages": 240, "rate": 4.0, "depth_max": 90, "in_flight_max": 3}


def test_current_is_the_newest_recent_window_of_each_series(history):
    newest = T0 + 60 * 89
    current = history.current(utc(newest + 90))
    assert set(current) == {("orders", ""), ("orders", "billing"), ("clicks", "ads")}
    assert current[("orders", "billing")]["ts"] == utc(newest)
    assert history.current(utc(newest) + timedelta(minutes=10)) == {}


def test_health_file_missing_unreadable_and_present(tmp_path):
    history = History(tmp_path)
    assert history.health() is None
    (tmp_path / "rollups").mkdir()
    (tmp_path / "rollups" / "health.json").write_text("{not json")
    assert history.health() is None
    layout.write_json(tmp_path / "rollups" / "health.json", {"generated": 5, "channels": []})
    assert history.health() == {"generated": 5, "channels": []}


def test_a_hidden_file_being_written_is_not_read(history, tmp_path):
    hidden = layout.hidden_twin(layout.rollup_partition(tmp_path, "1m", utc(T0)))
    hidden.write_bytes(b"half a file")
    assert len(history.series("1m", "orders", "billing")) == 90
