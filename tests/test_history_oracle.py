"""The Spark rollup job against an independent oracle: DuckDB computing the README's definitions from
the same raw files (tests/history_oracle.py), for every column of every window at every level, per
node and across nodes, on a scenario with restarts, missing polls, late files, channels appearing and
disappearing and polls on window boundaries (tests/history_scenario.py), rolled up in four
incremental runs as a recorder would deliver it."""

import math

import pytest

from nsqadmin.history import layout
from nsqadmin.history.rollup_job import run_rollup

from . import history_scenario as scenario
from .history_oracle import COLUMNS, expected_rollups
from .history_raw import rollups, utc, window
from .spark_fixtures import spark  # noqa: F401

# Sums across nodes are taken in fixed point (rollup_columns.py): thousandths of a message for
# means (and so for the percentiles of means), billionths of a message a second for rates.
TOLERANCE = {"depth_avg": 2e-3, "depth_p95": 2e-3, "rate": 1e-8}
AUDIT = ("orders", "audit")


@pytest.fixture(scope="module")
def rolled_up(spark, tmp_path_factory):  # noqa: F811
    """(the job's rollups, the oracle's) after the scenario's batches were rolled up one by one."""
    stats_dir = tmp_path_factory.mktemp("oracle")
    for batch in scenario.batches():
        scenario.write_batch(stats_dir, batch)
        run_rollup(stats_dir, spark, now=utc(scenario.END + 300))
    expected = expected_rollups(layout.visible_files(layout.raw_dir(stats_dir)))
    return {level: rollups(stats_dir, level) for level in layout.WINDOWS}, expected


def differences(actual: list[dict], expected: list[dict]) -> list[str]:
    def key(row):
        return row["node"], row["topic"], row["channel"], row["ts"]

    found, wanted = {key(row): row for row in actual}, {key(row): row for row in expected}
    out = [f"{name}: only in the job's rollups" for name in sorted(set(found) - set(wanted))]
    out += [f"{name}: missing from the job's rollups" for name in sorted(set(wanted) - set(found))]
    for name in sorted(set(found) & set(wanted)):
        for column in COLUMNS:
            got, want = found[name][column], wanted[name][column]
            if isinstance(want, float) and got is not None:
                same = math.isclose(got, want, rel_tol=1e-9, abs_tol=TOLERANCE.get(column, 1e-9))
            else:
                same = got == want
            if not same:
                out.append(f"{name} {column}: job {got!r}, oracle {want!r}")
    return out


@pytest.mark.parametrize("level", list(layout.WINDOWS))
def test_every_column_of_every_window_is_the_oracles(rolled_up, level):
    actual, expected = rolled_up
    assert len(expected[level]) > 40
    assert differences(actual[level], expected[level]) == []


def test_the_cluster_rate_is_the_sum_of_the_nodes_rates_when_a_node_was_seen_for_part_of_it(rolled_up):
    """Node 2 comes back at 00:17:10 after 17 minutes away: its minute covers 40 s, the others' 60."""
    minutes = rolled_up[0]["1m"]
    back = scenario.MIDNIGHT + 1020
    nodes = [window(minutes, node, *AUDIT, back) for node in scenario.NODES]
    cluster = window(minutes, layout.ALL_NODES, *AUDIT, back)
    assert [node["covered_seconds"] for node in nodes] == [60.0, 60.0, 40.0]
    assert cluster["rate"] == pytest.approx(sum(node["rate"] for node in nodes), abs=1e-8)
    assert cluster["rate"] > cluster["messages"] / cluster["covered_seconds"]
    assert cluster["messages"] == sum(node["messages"] for node in nodes)


def test_hours_and_days_across_nodes_never_cover_more_time_than_they_last(rolled_up):
    for level, seconds in (("1h", 3600), ("1d", 86400)):
        for row in rolled_up[0][level]:
            assert row["covered_seconds"] <= seconds, row


def test_a_restart_counts_every_counter_even_one_that_reads_the_same(rolled_up):
    """orders/audit's requeues read 2 before node 1's restart and 2 after it: 2 more requeues."""
    restart_minute = scenario.RESTARTS[scenario.NODES[1]] // 60 * 60
    minute = window(rolled_up[0]["1m"], scenario.NODES[1], *AUDIT, restart_minute)
    assert minute["requeues"] == 2
    old_format_restart = scenario.RESTARTS[scenario.NODES[0]] // 60 * 60  # no start_time: counters went down
    assert window(rolled_up[0]["1m"], scenario.NODES[0], *AUDIT, old_format_restart)["requeues"] == 2
