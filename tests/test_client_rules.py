"""The client library's pure rules: RDY distribution (go-nsq consumer.go), backoff levels,
go-nsq's option names, defaults, ranges and value syntax, and the lookupd URL and answer."""

import random

import pytest

from nsqclient import Config, ConfigError
from nsqclient.backoff import EXIT, BackoffState, Signal, reconnect_delay, strategy
from nsqclient.connection import identify_body, split_address
from nsqclient.lookupd_poller import lookup_url, producer_addresses
from nsqclient.rdy import (RdyView, available_max_in_flight, idle_connections, is_starved, needs_redistribution,
                           per_connection, pick_connections, within_max_in_flight)


@pytest.mark.parametrize("max_in_flight, connections, share", [
    (100, 1, 100), (100, 3, 33), (9, 2, 4), (2, 3, 1), (1, 5, 1), (0, 2, 0), (5, 0, 5)])
def test_each_connection_gets_its_share_at_least_one_at_most_all(max_in_flight, connections, share):
    assert per_connection(max_in_flight, connections) == share


@pytest.mark.parametrize("count, conn_rdy, total, fitted", [
    (5, 0, 0, 5),      # room for all of it
    (5, 0, 8, 2),      # cut down to what is left of 10
    (5, 3, 10, 3),     # this connection's own RDY counts as free
    (1, 0, 10, None),  # nothing left: the caller retries later
    (0, 0, 10, 0),     # RDY 0 always fits
])
def test_a_new_rdy_is_cut_to_what_is_left_of_max_in_flight(count, conn_rdy, total, fitted):
    assert within_max_in_flight(count, conn_rdy, 10, total) == fitted


def test_redistribution_is_needed_with_more_connections_than_max_in_flight_or_in_backoff():
    assert needs_redistribution(3, 2, False)
    assert not needs_redistribution(2, 2, False)
    assert needs_redistribution(2, 100, True)
    assert not needs_redistribution(1, 100, True)


def test_idle_connections_and_connections_holding_rdy_too_long_give_it_back():
    now = 100.0
    conns = [RdyView("busy", 1, now - 0.5, now - 2), RdyView("idle", 1, now - 11, now - 2),
             RdyView("hog", 1, now - 0.5, now - 31), RdyView("empty", 0, now - 50, now - 50)]
    assert idle_connections(conns, now, low_rdy_idle_timeout=10, low_rdy_timeout=30) == ["idle", "hog"]


def test_what_is_left_of_max_in_flight_goes_to_random_connections():
    assert available_max_in_flight(2, 1, in_backoff=False) == 1
    assert available_max_in_flight(100, 0, in_backoff=True) == 1
    rng = random.Random(7)
    picked = pick_connections(["a", "b", "c"], 2, rng)
    assert len(picked) == 2 and set(picked) <= {"a", "b", "c"}
    assert pick_connections(["a", "b"], 5, rng) in (["a", "b"], ["b", "a"])
    assert pick_connections(["a"], 0, rng) == []


def test_a_connection_is_starved_when_nearly_all_its_rdy_is_in_flight():
    assert is_starved([(85, 100, False)])
    assert not is_starved([(84, 100, False), (0, 0, False)])
    assert not is_starved([(100, 100, True)])


def test_backoff_levels_rise_on_failure_fall_on_success_and_exit_at_zero():
    state = BackoffState(strategy("exponential", 1.0, random.Random()), max_duration=10.0)
    assert state.update(Signal.SUCCESS) is None  # not in backoff: nothing to do
    assert state.update(Signal.FAILURE) == 2.0   # level 1: 1 s x 2^1
    state.in_timeout = True
    assert state.update(Signal.FAILURE) is None  # ignored while the timeout runs
    state.in_timeout = False
    assert state.update(Signal.FAILURE) == 4.0
    assert state.update(Signal.FAILURE) == 8.0
    assert state.update(Signal.FAILURE) == 8.0   # 16 s would pass max_backoff_duration: the level stays
    assert state.level == 3
    assert state.update(Signal.CONTINUE) == 8.0  # still in backoff: back off again at the same level
    assert state.update(Signal.SUCCESS) == 4.0
    assert state.update(Signal.SUCCESS) == 2.0
    assert state.update(Signal.SUCCESS) == EXIT
    assert not state.in_backoff


def test_full_jitter_backs_off_a_random_part_of_the_exponential_duration():
    duration_at = strategy("full_jitter", 1.0, random.Random(3))
    durations = [duration_at(3) for _ in range(50)]
    assert all(0 <= d < 8 for d in durations) and len(set(durations)) > 1


def test_reconnect_delays_double_from_one_second_up_to_the_poll_interval():
    assert [reconnect_delay(n, 60) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert reconnect_delay(0, 0.2) == 0.2


def test_go_nsq_defaults():
    config = Config()
    assert (config.max_in_flight, config.max_attempts, config.lookupd_poll_interval, config.lookupd_poll_jitter,
            config.default_requeue_delay, config.max_requeue_delay, config.max_backoff_duration,
            config.backoff_multiplier, config.low_rdy_idle_timeout, config.low_rdy_timeout,
            config.rdy_redistribute_interval, config.heartbeat_interval, config.read_timeout,
            config.write_timeout, config.dial_timeout, config.output_buffer_size,
            config.output_buffer_timeout) == (1, 5, 60, 0.3, 90, 900, 120, 1, 10, 30, 5, 30, 60, 1, 1, 16384, 0.25)
    assert config.user_agent.startswith("nsqclient/") and config.client_id and config.hostname


def test_options_by_go_nsq_names_from_command_line_strings():
    config = Config()
    config.set("max_in_flight", "200")
    config.set("lookupd-poll-interval", "15s")
    config.set("output_buffer_timeout", "100ms")
    config.set("snappy", "true")
    config.set("lookupd_poll_jitter", "0.5")
    assert (config.max_in_flight, config.lookupd_poll_interval, config.output_buffer_timeout, config.snappy,
            config.lookupd_poll_jitter) == (200, 15, 0.1, True, 0.5)


def test_command_line_option_flags_as_go_nsqs_config_flag_reads_them():
    config = Config()
    config.set_flag("max_attempts,10")
    config.set_flag("deflate")
    config.set_flag("user_agent,a,b")
    assert (config.max_attempts, config.deflate, config.user_agent) == (10, True, "a,b")
    with pytest.raises(ConfigError):
        config.set_flag("max_in_flight")


@pytest.mark.parametrize("option, value, message", [
    ("max_in_flight", "-1", "invalid max_in_flight ! -1 < 0"),
    ("rdy_redistribute_interval", "6s", "invalid rdy_redistribute_interval ! 6s > 5s"),
    ("lookupd_poll_interval", "1ms", "invalid lookupd_poll_interval ! 1ms < 10ms"),
    ("sample_rate", "100", "invalid sample_rate ! 100 > 99"),
    ("heartbeat_interval", "61s", "HeartbeatInterval 1m1s must be less than ReadTimeout 1m0s"),
    ("max_in_flight", "lots", "failed to coerce option max_in_flight ('lots')"),
    ("snappy", "yes please", "failed to coerce option snappy"),
    ("read_timeout", "5", "failed to coerce option read_timeout ('5') - time: missing unit"),
    ("no_such_option", "1", "invalid option no_such_option"),
    ("backoff_strategy", "linear", "invalid backoff_strategy 'linear'"),
])
def test_bad_options_are_refused_with_go_nsqs_wording(option, value, message):
    with pytest.raises(ConfigError) as raised:
        Config().set(option, value)
    assert str(raised.value).startswith(message)


def test_identify_carries_the_options_as_go_nsq_sends_them():
    body = identify_body(Config(heartbeat_interval=-1, output_buffer_timeout=0.1, msg_timeout=120, sample_rate=10,
                                snappy=True, client_id="c", hostname="h"))
    assert body == {"client_id": "c", "hostname": "h", "user_agent": Config().user_agent, "short_id": "c",
                    "long_id": "h", "tls_v1": False, "deflate": False, "deflate_level": 6, "snappy": True,
                    "feature_negotiation": True, "heartbeat_interval": -1, "sample_rate": 10,
                    "output_buffer_size": 16384, "output_buffer_timeout": 100, "msg_timeout": 120000}


def test_addresses():
    assert split_address("127.0.0.1:4150") == ("127.0.0.1", 4150)
    assert split_address("[::1]:4150") == ("::1", 4150)
    with pytest.raises(ValueError):
        split_address("localhost")
    assert lookup_url("127.0.0.1:4161", "t") == "http://127.0.0.1:4161/lookup?topic=t"
    assert lookup_url("https://l:4161/?x=1", "t") == "https://l:4161/lookup?x=1&topic=t"
    assert lookup_url("http://l:4161/v2/lookup", "t") == "http://l:4161/v2/lookup?topic=t"
    with pytest.raises(ValueError):
        lookup_url("lookupd", "t")


def test_lookup_answers_become_nsqd_tcp_addresses():
    producer = {"broadcast_address": "a", "tcp_port": 4150}
    assert producer_addresses({"channels": [], "producers": [producer, {**producer, "broadcast_address": "::1"}]}) \
        == ["a:4150", "[::1]:4150"]
    assert producer_addresses({"status_code": 200, "data": {"producers": [producer]}}) == ["a:4150"]
    assert producer_addresses({"producers": None}) == []
