"""The cluster model without a network: producers (clusterinfo/producers.py) and stats aggregation
(clusterinfo/stats.py), checked against NSQ v1.3's nsqadmin (internal/clusterinfo/types.go, quantile/aggregate.go)."""

import json
from pathlib import Path

import pytest

from clusterinfo import producers, stats

NOW = 1_700_000_100.7


def raw_client(client_id: str, hostname: str, **overrides) -> dict:
    client = {"client_id": client_id, "hostname": hostname, "version": "V2", "remote_address": "10.0.0.9:5000",
              "state": 3, "ready_count": 10, "in_flight_count": 2, "message_count": 50, "finish_count": 47,
              "requeue_count": 1, "connect_ts": 1_700_000_000, "sample_rate": 0, "deflate": False, "snappy": True,
              "user_agent": "pynsq/0.9.1", "tls": False, "tls_cipher_suite": "", "tls_version": "",
              "tls_negotiated_protocol": "", "tls_negotiated_protocol_is_mutual": False}
    client.update(overrides)
    return client


def raw_channel(name: str, depth: int = 0, backend: int = 0, clients=None, percentiles=None, count: int = 0,
                **overrides) -> dict:
    channel = {"channel_name": name, "depth": depth, "backend_depth": backend, "in_flight_count": 1,
               "deferred_count": 2, "message_count": 100, "requeue_count": 3, "timeout_count": 4,
               "client_count": len(clients or []), "clients": clients, "paused": False,
               "e2e_processing_latency": {"count": count, "percentiles": percentiles}}
    channel.update(overrides)
    return channel


def raw_topic(name: str, channels: list, depth: int = 0, backend: int = 0, **overrides) -> dict:
    topic = {"topic_name": name, "channels": channels, "depth": depth, "backend_depth": backend,
             "message_count": 1000, "message_bytes": 123456, "paused": False,
             "e2e_processing_latency": {"count": 0, "percentiles": None}}
    topic.update(overrides)
    return topic


def rows_of(node: str, hostname: str, *topics) -> list[dict]:
    return stats.node_topics({"topics": list(topics)}, node, hostname, now=NOW)


# -- per-node rows ------------------------------------------------------------------------


def test_node_rows_carry_nsqadmin_keys_in_nsq_order():
    [row] = rows_of("10.0.0.1:4151", "alpha", raw_topic("orders", [raw_channel("billing", 7, 3, [raw_client("c1", "h1")])],
                                                         depth=5, backend=2))
    assert list(row) == ["node", "hostname", "topic_name", "depth", "memory_depth", "backend_depth", "message_count",
                         "message_bytes", "nodes", "channels", "paused", "e2e_processing_latency"]
    assert (row["node"], row["hostname"], row["depth"], row["memory_depth"], row["backend_depth"]) == \
        ("10.0.0.1:4151", "alpha", 5, 3, 2)
    assert row["message_bytes"] == 123456 and row["nodes"] is None
    [channel] = row["channels"]
    assert list(channel) == ["node", "hostname", "topic_name", "channel_name", "depth", "memory_depth", "backend_depth",
                             "in_flight_count", "deferred_count", "requeue_count", "timeout_count", "message_count",
                             "client_count", "nodes", "clients", "paused", "e2e_processing_latency"]
    assert (channel["topic_name"], channel["memory_depth"], channel["client_count"]) == ("orders", 4, 1)
    [client] = channel["clients"]
    assert list(client)[:6] == ["node", "remote_address", "version", "client_id", "hostname", "user_agent"]
    assert client["node"] == "10.0.0.1:4151"
    assert client["connected"] == 100 * 10**9  # now truncated to the second, minus connect_ts, in ns
    assert client["state"] == 3 and client["snappy"] is True


def test_clients_excluded_stay_null_and_topic_filter_applies():
    answer = {"topics": [raw_topic("a", [raw_channel("c")]), raw_topic("b", [])]}
    [row] = stats.node_topics(answer, "n:1", "h", selected_topic="b", now=NOW)
    assert row["topic_name"] == "b" and row["channels"] == []
    [row] = stats.node_topics(answer, "n:1", "h", selected_topic="a", now=NOW)
    assert row["channels"][0]["clients"] is None


@pytest.mark.parametrize("bad", [{"topics": [{"topic_name": "t", "depth": "many"}]}, ["not", "an", "object"],
                                 {"topics": [{"topic_name": 7}]}])
def test_malformed_stats_are_refused(bad):
    with pytest.raises(ValueError):
        stats.node_topics(bad, "n:1", "h", now=NOW)


def test_node_e2e_spreads_value_into_min_max_average():
    block = stats.node_e2e({"count": 5, "percentiles": [{"quantile": 0.99, "value": 1500.0}]})
    assert block == {"count": 5, "percentiles": [{"average": 1500, "count": 5, "max": 1500, "min": 1500,
                                                  "quantile": 0.99, "value": 1500}],
                     "topic": "", "channel": "", "host": ""}
    assert stats.node_e2e({"count": 0, "percentiles": None})["percentiles"] is None
    assert stats.node_e2e(None) == {"count": 0, "percentiles": None, "topic": "", "channel": "", "host": ""}


# -- across nodes ---------------------------------------------------------------------------


def two_nodes() -> list[dict]:
    beta = rows_of("10.0.0.2:4151", "beta", raw_topic("orders", [
        raw_channel("billing", 10, 4, [raw_client("b1", "zed"), raw_client("b2", "able")],
                    [{"quantile": 0.99, "value": 3000}, {"quantile": 0.5, "value": 100}], count=30, paused=True),
        raw_channel("audit", 1),
    ], depth=2, backend=1))
    alpha = rows_of("10.0.0.1:4151", "alpha", raw_topic("orders", [
        raw_channel("billing", 5, 0, [raw_client("a1", "mid")], [{"quantile": 0.99, "value": 1000}], count=10),
    ], depth=3))
    return beta + alpha


def test_topic_aggregate_sums_and_sorts_nodes_by_hostname():
    total = stats.aggregate_topic("orders", two_nodes())
    assert (total["node"], total["hostname"], total["topic_name"]) == ("*", "", "orders")
    assert (total["depth"], total["memory_depth"], total["backend_depth"], total["message_count"]) == (5, 4, 1, 2000)
    assert [row["hostname"] for row in total["nodes"]] == ["alpha", "beta"]
    assert [c["channel_name"] for c in total["channels"]] == ["audit", "billing"]
    billing = total["channels"][1]
    assert (billing["node"], billing["depth"], billing["memory_depth"], billing["client_count"]) == ("*", 15, 11, 3)
    assert billing["in_flight_count"] == 2 and billing["timeout_count"] == 8
    assert billing["paused"] is True and total["paused"] is False
    assert [row["node"] for row in billing["nodes"]] == ["10.0.0.1:4151", "10.0.0.2:4151"]
    assert [c["hostname"] for c in billing["clients"]] == ["able", "mid", "zed"]


def test_keys_beyond_nsq_are_kept_only_where_an_nsqd_reports_them():
    plain = stats.aggregate_topic("orders", two_nodes())
    assert "msg_ttl" not in plain and "expired_count" not in plain["channels"][1]
    with_ttl = rows_of("10.0.0.3:4151", "gamma", raw_topic("orders", [raw_channel("billing", expired_count=7)],
                                                           msg_ttl=60_000, expired_count=2))
    total = stats.aggregate_topic("orders", two_nodes() + with_ttl)
    assert (total["msg_ttl"], total["expired_count"], total["channels"][1]["expired_count"]) == (60_000, 2, 7)
    assert "expired_count" not in total["nodes"][0] and total["nodes"][2]["msg_ttl"] == 60_000
    other_ttl = rows_of("10.0.0.4:4151", "delta", raw_topic("orders", [], msg_ttl=1_000, expired_count=1))
    assert stats.aggregate_topic("orders", with_ttl + other_ttl)["msg_ttl"] is None  # the nodes differ
    dead = rows_of("10.0.0.5:4151", "eps", raw_topic("orders", [raw_channel(
        "billing", max_attempts=5, dead_letter_topic="orders.dead", dead_letter_count=3)]))
    billing = stats.aggregate_topic("orders", dead + with_ttl)["channels"][0]
    assert (billing["max_attempts"], billing["dead_letter_topic"], billing["dead_letter_count"]) == (5, "orders.dead", 3)
    assert billing["expired_count"] == 7


def test_e2e_aggregate_weights_averages_by_count_and_keeps_true_min():
    billing = stats.aggregate_topic("orders", two_nodes())["channels"][1]
    e2e = billing["e2e_processing_latency"]
    assert (e2e["count"], e2e["topic"], e2e["channel"], e2e["host"]) == (40, "orders", "billing", "*")
    p99, p50 = e2e["percentiles"]
    assert p99 == {"average": 2500, "count": 40, "max": 3000, "min": 1000, "quantile": 0.99}  # (1000*10+3000*30)/40
    assert p50 == {"average": 100, "count": 30, "max": 100, "min": 100, "quantile": 0.5}
    assert list(p99) == sorted(p99)  # Go marshals the map with sorted keys


def test_e2e_without_percentiles_stays_null():
    audit = stats.aggregate_topic("orders", two_nodes())["channels"][0]
    assert audit["e2e_processing_latency"] == {"count": 0, "percentiles": None, "topic": "orders",
                                               "channel": "audit", "host": "*"}


def test_aggregating_leaves_per_node_rows_untouched():
    rows = two_nodes()
    before = [dict(row) for row in rows]
    stats.aggregate_topic("orders", rows)
    stats.all_channels(rows)
    assert [dict(row) for row in rows] == before
    assert rows[0]["channels"][0]["node"] == "10.0.0.2:4151"


def test_clients_null_when_no_node_sent_clients():
    rows = rows_of("n:1", "h", raw_topic("t", [raw_channel("c")])) + rows_of("n:2", "g", raw_topic("t", [raw_channel("c")]))
    assert stats.aggregate_topic("t", rows)["channels"][0]["clients"] is None


def test_topic_without_nodes_or_channels():
    total = stats.aggregate_topic("t", [])
    assert (total["node"], total["nodes"], total["channels"]) == ("", None, None)
    assert total["e2e_processing_latency"]["host"] == ""


def test_counter_stats_one_entry_per_channel_and_node():
    counted = stats.counter_stats(two_nodes())
    assert counted["orders:billing:10.0.0.2:4151"] == {"node": "10.0.0.2:4151", "topic_name": "orders",
                                                       "channel_name": "billing", "message_count": 100}
    assert set(counted) == {"orders:billing:10.0.0.2:4151", "orders:audit:10.0.0.2:4151", "orders:billing:10.0.0.1:4151"}


def test_all_channels_keyed_topic_colon_channel():
    rows = two_nodes() + rows_of("10.0.0.1:4151", "alpha", raw_topic("events", [raw_channel("billing", 9)]))
    channels = stats.all_channels(rows)
    assert set(channels) == {"orders:billing", "orders:audit", "events:billing"}
    assert channels["events:billing"]["depth"] == 9


def test_node_totals_and_topic_summary():
    rows = two_nodes()
    beta_rows = [row for row in rows if row["hostname"] == "beta"]
    assert stats.node_totals(beta_rows) == (1000, 2)
    summary = stats.topic_summary("orders", rows)
    assert summary == {"topic_name": "orders", "nodes": 2, "depth": 5 + 16, "topic_depth": 5, "in_flight_count": 3,
                       "message_count": 2000, "message_bytes": 2 * 123456, "channel_count": 2, "client_count": 3,
                       "paused": False, "paused_channels": ["billing"]}


# -- producers ------------------------------------------------------------------------------


def lookupd_node(n: int, version: str = "1.3.0", topics=("b", "a"), tombstones=(False, True), **overrides) -> dict:
    node = {"remote_address": f"127.0.0.1:{50000 + n}", "hostname": f"host{n}", "broadcast_address": f"nsqd{n}",
            "tcp_port": 4150, "http_port": 4151, "version": version, "tombstones": list(tombstones),
            "topics": list(topics)}
    node.update(overrides)
    return node


def test_merge_lookupd_nodes_dedupes_and_records_each_lookupd():
    merged = producers.merge_lookupd_nodes([
        ("lookupd1:4161", [lookupd_node(2), lookupd_node(1, version="1.2.1")]),
        ("lookupd2:4161", [lookupd_node(1, version="1.2.1")]),
    ])
    assert [p["hostname"] for p in merged] == ["host1", "host2"]
    first = merged[0]
    assert list(first) == ["remote_addresses", "remote_address", "hostname", "broadcast_address", "tcp_port",
                           "http_port", "version", "topics", "out_of_date"]
    assert first["remote_addresses"] == ["lookupd1:4161/127.0.0.1:50001", "lookupd2:4161/127.0.0.1:50001"]
    assert first["topics"] == [{"topic": "a", "tombstoned": True}, {"topic": "b", "tombstoned": False}]
    assert first["out_of_date"] is True and merged[1]["out_of_date"] is False
    assert producers.active_topics(merged) == {"b"}


def test_versions_compare_semantically():
    assert producers.version_key("1.10.0") > producers.version_key("1.9.9")
    assert producers.version_key("1.3.0") > producers.version_key("1.3.0-rc1")
    assert producers.version_key("1.3.0-rc2") > producers.version_key("1.3.0-rc1")
    assert producers.version_key("garbage") < producers.version_key("0.0.1")


def test_http_address_brackets_ipv6_and_find_uses_it():
    node = producers.producer(lookupd_node(1, broadcast_address="::1", http_port=4151))
    assert producers.http_address(node) == "[::1]:4151"
    assert producers.tcp_address(node) == "[::1]:4150"
    assert producers.find([node], "[::1]:4151") is node
    assert producers.find([node], "::1:4151") is None


def test_lookup_producers_union_by_http_address():
    a = producers.producer(lookupd_node(1, topics=(), tombstones=()))
    b = producers.producer(lookupd_node(2, topics=(), tombstones=()))
    assert producers.union_by_http_address([[a], [dict(a), b]]) == [a, b]


def test_nsqd_producer_falls_back_to_the_address_asked():
    old = producers.nsqd_producer({"version": "0.3.8"}, "10.1.2.3:4151", ["t"])
    assert (old["broadcast_address"], old["http_port"], old["hostname"]) == ("10.1.2.3", 4151, "10.1.2.3")
    assert old["topics"] == [{"topic": "t", "tombstoned": False}] and old["remote_addresses"] is None


def test_malformed_producers_are_refused():
    with pytest.raises(ValueError):
        producers.producer({"hostname": 5})
    with pytest.raises(ValueError):
        producers.producer("nope")
    tolerant = producers.producer(lookupd_node(1, tombstones=[]))
    assert [t["tombstoned"] for t in tolerant["topics"]] == [False, False]


def test_reads_go_nsqds_stats_document():
    """A mixed cluster: the /stats of NSQ's Go nsqd v1.3 (fixture written from its structs) reads the same."""
    go_stats = json.loads((Path(__file__).parent / "fixtures" / "nsq_v13_stats.json").read_text())
    rows = stats.node_topics(go_stats, "10.0.0.5:4151", "go-nsqd", now=1704208000)
    orders = next(row for row in rows if row["topic_name"] == "orders")
    assert (orders["message_count"], orders["node"], orders["hostname"]) == (12, "10.0.0.5:4151", "go-nsqd")
    [client] = orders["channels"][0]["clients"]
    assert (client["client_id"], client["user_agent"], client["connected"]) == ("worker-1", "go-nsq/1.1.0", 100 * 10**9)
    total = stats.aggregate_topic("orders", [orders])
    assert total["channels"][0]["client_count"] == 1 and total["channels"][0]["in_flight_count"] == 1
