"""Channel health from its last 1-minute windows: every status, the precedence, and the edges."""

from datetime import datetime, timedelta, timezone

import pytest

from nsqadmin.history.health import (HEALTH_WINDOWS, IDLE, LAGGING, NO_CONSUMERS, OK, STALLED, STATUSES,
                                     channel_health)
from nsqadmin.history.layout import ALL_NODES, ROLLUP_SCHEMA

START = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def window(minute: int, **values) -> dict:
    """One across-nodes 1m rollup row: a fully observed, quiet minute unless ``values`` say otherwise."""
    row = {name: 0 for name in ROLLUP_SCHEMA.names}
    row.update(ts=START + timedelta(minutes=minute), node=ALL_NODES, topic="orders", channel="billing",
               samples=6, covered_seconds=60.0, paused_last=False, e2e_p99_max=None)
    row.update(values)
    return row


def minutes(*rows: dict) -> list[dict]:
    """Consecutive windows, one per row of values."""
    return [window(minute, **values) for minute, values in enumerate(rows)]


def test_no_windows_is_idle():
    assert channel_health([]) == (IDLE, "nothing queued and nothing published yet")


def test_quiet_channel_is_idle():
    assert channel_health(minutes(*[{"clients_last": 2}] * 5)) == (
        IDLE, "nothing queued and nothing published in 5 minutes")


def test_one_quiet_window_is_idle():
    assert channel_health(minutes({})) == (IDLE, "nothing queued and nothing published in 1 minute")


def test_consumers_keeping_up_is_ok():
    rows = minutes(*[{"messages": 7200, "finished": 7200, "depth_last": 3, "clients_last": 2}] * 5)
    assert channel_health(rows) == (OK, "consumers keep up: 120.0 msg/s in, depth 3")


def test_an_empty_queue_with_traffic_is_ok():
    rows = minutes(*[{"messages": 600, "finished": 600, "clients_last": 1}] * 5)
    assert channel_health(rows) == (OK, "consumers keep up: 10.0 msg/s in, depth 0")


def test_rate_counts_only_the_seconds_observed():
    rows = minutes({"messages": 300, "finished": 300, "depth_last": 1, "clients_last": 1, "covered_seconds": 30.0},
                   {"messages": 600, "finished": 600, "depth_last": 1, "clients_last": 1})
    assert channel_health(rows) == (OK, "consumers keep up: 10.0 msg/s in, depth 1")


def test_growing_depth_while_finishing_is_lagging():
    depths = [434, 434, 700, 1000, 1234]
    rows = minutes(*[{"messages": 1000, "finished": 720, "depth_last": depth, "clients_last": 3}
                     for depth in depths])
    assert channel_health(rows) == (
        LAGGING, "depth 1,234 and rising for 5 minutes (+800) while consumers finish 12.0 msg/s")


def test_exactly_flat_depth_is_ok_not_lagging():
    rows = minutes(*[{"messages": 600, "finished": 600, "depth_last": 500, "clients_last": 3}] * 5)
    assert channel_health(rows)[0] == OK


def test_depth_that_dipped_is_not_lagging():
    depths = [100, 200, 150, 300, 400]
    rows = minutes(*[{"messages": 600, "finished": 500, "depth_last": depth, "clients_last": 3}
                     for depth in depths])
    assert channel_health(rows)[0] == OK


def test_one_window_cannot_be_lagging():
    rows = minutes({"messages": 600, "finished": 300, "depth_last": 300, "clients_last": 1})
    assert channel_health(rows) == (OK, "consumers keep up: 10.0 msg/s in, depth 300")


def test_depth_with_consumers_finishing_nothing_is_stalled():
    rows = minutes(*[{"depth_last": 500, "clients_last": 3}] * 5)
    assert channel_health(rows) == (
        STALLED, "depth 500 with 3 consumers connected but nothing finished in 5 minutes")


def test_requeues_without_finishes_are_stalled():
    rows = minutes(*[{"messages": 10, "requeues": 8, "timeouts": 1, "depth_last": 500 + 10 * minute,
                      "clients_last": 1} for minute in range(5)])
    assert channel_health(rows) == (
        STALLED, "depth 540 with 1 consumer connected but nothing finished in 5 minutes (40 requeued, 5 timed out)")


def test_rising_depth_with_nothing_finished_is_stalled_not_lagging():
    rows = minutes(*[{"messages": 100, "depth_last": 100 * (minute + 1), "clients_last": 2} for minute in range(5)])
    assert channel_health(rows)[0] == STALLED


def test_depth_and_no_client_in_the_last_window_is_no_consumers():
    rows = minutes(*[{"messages": 600, "finished": 600, "depth_last": 10, "clients_last": 2}] * 4,
                   {"messages": 600, "finished": 100, "depth_last": 500, "clients_last": 0, "clients_max": 2})
    assert channel_health(rows) == (NO_CONSUMERS, "depth 500 and no consumer connected")


def test_no_consumers_comes_before_stalled():
    rows = minutes(*[{"depth_last": 500}] * 5)
    assert channel_health(rows) == (NO_CONSUMERS, "depth 500 and no consumer connected")


def test_paused_channel_holding_messages_is_stalled_and_says_paused():
    rows = minutes(*[{"messages": 60, "depth_last": 60 * (minute + 1), "clients_last": 2, "paused_last": True}
                     for minute in range(5)])
    assert channel_health(rows) == (STALLED, "paused with depth 300")


def test_paused_comes_before_no_consumers():
    rows = minutes({"depth_last": 42, "paused_last": True})
    assert channel_health(rows) == (STALLED, "paused with depth 42")


def test_paused_empty_channel_is_idle():
    rows = minutes(*[{"paused_last": True}] * 3)
    assert channel_health(rows) == (IDLE, "nothing queued and nothing published in 3 minutes")


def test_only_the_last_windows_count():
    assert HEALTH_WINDOWS == 5
    rows = minutes({"messages": 600, "finished": 600, "depth_last": 500, "clients_last": 1},
                   *[{"depth_last": 500, "clients_last": 1}] * HEALTH_WINDOWS)
    assert channel_health(rows) == (
        STALLED, "depth 500 with 1 consumer connected but nothing finished in 5 minutes")


def test_a_gap_between_windows_counts_in_the_span():
    rows = [window(0, depth_last=500, clients_last=2), window(9, depth_last=500, clients_last=2)]
    assert channel_health(rows) == (
        STALLED, "depth 500 with 2 consumers connected but nothing finished in 10 minutes")


def test_large_numbers_read_with_separators():
    rows = minutes({"messages": 6_000_000, "finished": 6_000_000, "depth_last": 1_234_567, "clients_last": 9})
    assert channel_health(rows) == (OK, "consumers keep up: 100,000.0 msg/s in, depth 1,234,567")


@pytest.mark.parametrize("rows", [[], minutes({}), minutes({"depth_last": 1}), minutes({"depth_last": 1, "clients_last": 1}),
                                  minutes({"depth_last": 1, "paused_last": True})])
def test_every_answer_is_a_known_status(rows):
    status, reason = channel_health(rows)
    assert status in STATUSES and reason


def test_null_values_count_as_zero():
    rows = minutes({"messages": None, "finished": None, "depth_last": None, "clients_last": None,
                    "covered_seconds": None, "paused_last": None})
    assert channel_health(rows) == (IDLE, "nothing queued and nothing published in 1 minute")
