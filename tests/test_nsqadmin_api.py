"""nsqadmin's JSON API against a real cluster: nsqlookupd + two nsqd + nsqadmin processes, real
consumers and producers; every route, its errors and NSQ v1.3's JSON shapes (nsqadmin/http.go)."""

import httpx
import pytest

from .admin_helpers import Consumer, cluster, lookupd_knows, nsqd_stats, publish, topic_on, wait_for  # noqa: F401

TOPIC_KEYS = ["node", "hostname", "topic_name", "depth", "memory_depth", "backend_depth", "message_count",
              "message_bytes", "nodes", "channels", "paused", "e2e_processing_latency"]  # + message_bytes, nsqd's
CHANNEL_KEYS = ["node", "hostname", "topic_name", "channel_name", "depth", "memory_depth", "backend_depth",
                "in_flight_count", "deferred_count", "requeue_count", "timeout_count", "message_count", "client_count",
                "nodes", "clients", "paused", "e2e_processing_latency"]
CLIENT_KEYS = ["node", "remote_address", "version", "client_id", "hostname", "user_agent", "connect_ts", "connected",
               "in_flight_count", "ready_count", "finish_count", "requeue_count", "message_count", "sample_rate",
               "deflate", "snappy", "authed", "auth_identity", "auth_identity_url", "tls", "tls_cipher_suite",
               "tls_version", "tls_negotiated_protocol", "tls_negotiated_protocol_is_mutual"]
PRODUCER_KEYS = ["remote_addresses", "remote_address", "hostname", "broadcast_address", "tcp_port", "http_port",
                 "version", "topics", "out_of_date"]
V1 = "nsq; version=1.0"


@pytest.fixture(scope="module")
def api(cluster):
    with httpx.Client(base_url=cluster.admin.url, timeout=10) as client:
        yield client


def ok_json(answer: httpx.Response) -> dict:
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-NSQ-Content-Type"] == V1
    assert answer.headers["content-type"].startswith("application/json")
    return answer.json()


def error_of(answer: httpx.Response) -> tuple[int, str]:
    assert answer.headers["X-NSQ-Content-Type"] == V1
    return answer.status_code, answer.json()["message"]


# -- reading --------------------------------------------------------------------------------


def test_ping(api):
    answer = api.get("/ping")
    assert (answer.status_code, answer.text) == (200, "OK")
    assert answer.headers["content-type"].startswith("text/plain")


def test_topics_lists_every_topic_from_the_lookupds(cluster, api):
    publish(cluster, 0, "listed-a", 1)
    publish(cluster, 1, "listed-b", 1)
    lookupd_topics = f"http://{cluster.lookupd_http}/topics"
    wait_for(lambda: {"listed-a", "listed-b"} <= set(httpx.get(lookupd_topics).json()["topics"]))
    body = ok_json(api.get("/api/topics"))
    assert list(body) == ["topics", "message"] and body["message"] == ""
    assert {"listed-a", "listed-b"} <= set(body["topics"]) and body["topics"] == sorted(body["topics"])


def test_topic_sums_every_nsqd_with_nsq_keys(cluster, api):
    topic_on(cluster, "orders", "billing", (3, 5))
    body = ok_json(api.get("/api/topics/orders"))
    assert list(body) == TOPIC_KEYS + ["message"]
    assert (body["node"], body["hostname"], body["topic_name"], body["message_count"]) == ("*", "", "orders", 8)
    assert body["message_bytes"] == sum(len(b"message %d" % i) for count in (3, 5) for i in range(count))
    assert sorted(row["node"] for row in body["nodes"]) == sorted([cluster.node(0), cluster.node(1)])
    for row in body["nodes"]:
        assert list(row) == TOPIC_KEYS and row["nodes"] is None and row["hostname"]
        assert list(row["channels"][0]) == CHANNEL_KEYS
    [channel] = body["channels"]
    assert (channel["channel_name"], channel["node"], channel["depth"], channel["message_count"]) == ("billing", "*", 8, 8)
    assert channel["clients"] is None  # the topic view asks nsqd without clients
    assert channel["depth"] == channel["memory_depth"] + channel["backend_depth"]


def test_e2e_latency_is_aggregated_over_the_nodes_that_track_it(cluster, api):
    topic_on(cluster, "timed", "work", (4, 0))
    consumer = Consumer(cluster.nsqds[0].tcp_port, "timed", "work", rdy=10)
    body = wait_for(lambda: (b := ok_json(api.get("/api/topics/timed/work")))["e2e_processing_latency"]["count"] == 4
                    and b, what="4 messages finished")
    e2e = body["e2e_processing_latency"]
    assert (e2e["topic"], e2e["channel"], e2e["host"]) == ("timed", "work", "*")
    assert [p["quantile"] for p in e2e["percentiles"]] == [0.99, 0.5]
    assert sorted(e2e["percentiles"][0]) == ["average", "count", "max", "min", "quantile"]
    tracked = next(row for row in body["nodes"] if row["node"] == cluster.node(0))["e2e_processing_latency"]
    assert sorted(tracked["percentiles"][0]) == ["average", "count", "max", "min", "quantile", "value"]
    assert tracked["count"] == 4
    consumer.close()


def test_channel_shows_live_clients_of_every_node(cluster, api):
    topic_on(cluster, "live", "watchers", (2, 2))
    first = Consumer(cluster.nsqds[0].tcp_port, "live", "watchers", rdy=5, client_id="<b>first</b>",
                     user_agent="pynsq/0.9.1")
    second = Consumer(cluster.nsqds[1].tcp_port, "live", "watchers", rdy=7, client_id="second", hostname="aaa.example")
    wait_for(lambda: first.delivered == 2 and second.delivered == 2)
    body = wait_for(lambda: (b := ok_json(api.get("/api/topics/live/watchers")))["client_count"] == 2
                    and [c["finish_count"] for c in b["clients"]] == [2, 2] and b)
    assert list(body) == CHANNEL_KEYS + ["message"]
    assert (body["node"], body["topic_name"], body["channel_name"]) == ("*", "live", "watchers")
    clients = body["clients"]
    assert [c["hostname"] for c in clients] == ["aaa.example", "test-consumer.example"]  # sorted by hostname
    assert all(list(c)[:len(CLIENT_KEYS)] == CLIENT_KEYS for c in clients)
    mine = clients[1]
    assert (mine["client_id"], mine["user_agent"], mine["ready_count"], mine["node"]) == \
        ("<b>first</b>", "pynsq/0.9.1", 5, cluster.node(0))
    assert mine["finish_count"] == 2 and mine["version"] == "V2" and mine["state"] == 3
    assert isinstance(mine["connected"], int) and mine["connected"] % 1_000_000_000 == 0
    assert sorted(row["node"] for row in body["nodes"]) == sorted([cluster.node(0), cluster.node(1)])
    first.close()
    second.close()


def test_unknown_channel_and_unknown_topic(cluster, api):
    topic_on(cluster, "sparse", "real", (1, 1))
    assert ok_json(api.get("/api/topics/sparse/imaginary")) == {"message": ""}  # NSQ: a nil channel, the message
    status, message = error_of(api.get("/api/topics/never-published"))
    assert status == 502
    assert message.startswith("UPSTREAM_ERROR: failed to query any nsqlookupd: got response 404 Not Found")
    assert "TOPIC_NOT_FOUND" in message


def test_nodes_lists_each_nsqd_once_with_its_topics(cluster, api):
    topic_on(cluster, "nodes-topic", "c", (3, 5))
    nodes = ok_json(api.get("/api/nodes"))["nodes"]
    assert len(nodes) == 2
    for node in nodes:
        assert list(node) == PRODUCER_KEYS
        assert node["broadcast_address"] == "127.0.0.1" and node["version"] == "1.3.0" and node["out_of_date"] is False
        [seen_at] = node["remote_addresses"]
        assert seen_at.startswith(cluster.lookupd_http + "/127.0.0.1:")
        assert {"topic": "nodes-topic", "tombstoned": False} in node["topics"]
        assert node["topics"] == sorted(node["topics"], key=lambda t: t["topic"])
    assert sorted(f"127.0.0.1:{n['http_port']}" for n in nodes) == sorted([cluster.node(0), cluster.node(1)])


def test_node_reports_its_topics_and_totals(cluster, api):
    topic_on(cluster, "one-node", "c", (6, 1))
    consumer = Consumer(cluster.nsqds[0].tcp_port, "one-node", "c", rdy=1)
    wait_for(lambda: consumer.delivered >= 1)
    body = wait_for(lambda: (b := ok_json(api.get(f"/api/nodes/{cluster.node(0)}")))["total_clients"] >= 1 and b)
    assert list(body) == ["node", "topics", "total_messages", "total_clients", "message"]
    assert body["node"] == cluster.node(0)
    topic = next(t for t in body["topics"] if t["topic_name"] == "one-node")
    assert topic["node"] == cluster.node(0) and topic["message_count"] == 6
    assert topic["channels"][0]["clients"][0]["client_id"] == "test-consumer"
    assert body["total_messages"] == sum(t["message_count"] for t in body["topics"])
    consumer.close()
    assert error_of(api.get("/api/nodes/10.9.9.9:4151")) == (404, "NODE_NOT_FOUND")


def test_counter_counts_each_channel_on_each_node(cluster, api):
    topic_on(cluster, "counted", "c1", (2, 3))
    body = ok_json(api.get("/api/counter"))
    stats = body["stats"]
    assert list(stats) == sorted(stats)
    entry = stats[f"counted:c1:{cluster.node(1)}"]
    assert entry == {"node": cluster.node(1), "topic_name": "counted", "channel_name": "c1", "message_count": 3}
    assert stats[f"counted:c1:{cluster.node(0)}"]["message_count"] == 2


def test_inactive_topics_are_those_without_producers(cluster, api):
    for path in ("/topic/create?topic=dormant", "/channel/create?topic=dormant&channel=old"):
        assert httpx.post(f"http://{cluster.lookupd_http}{path}").status_code == 200
    topic_on(cluster, "awake", "c", (3, 5))
    body = ok_json(api.get("/api/topics", params={"inactive": "true"}))
    assert body["topics"]["dormant"] == ["old"]
    assert "awake" not in body["topics"] and list(body["topics"]) == sorted(body["topics"])


# -- changing -------------------------------------------------------------------------------


def test_create_topic_and_channel(cluster, api):
    topic_on(cluster, "grown", "first", (3, 5))
    assert ok_json(api.post("/api/topics", json={"topic": "grown", "channel": "second"})) == {"message": ""}
    lookup = httpx.get(f"http://{cluster.lookupd_http}/channels", params={"topic": "grown"}).json()
    assert "second" in lookup["channels"]
    for n in (0, 1):
        assert "second" in [c["channel_name"] for c in nsqd_stats(cluster, n, "grown")["channels"]]
    assert ok_json(api.post("/api/topics", json={"topic": "fresh-topic"})) == {"message": ""}
    assert "fresh-topic" in ok_json(api.get("/api/topics"))["topics"]


@pytest.mark.parametrize("body, status, message", [
    (b"", 400, "EOF"),
    (b"{nope", 400, "invalid character 'n' looking for beginning of object key string"),
    (b'{"topic": "bad topic"}', 400, "INVALID_TOPIC"),
    (b'{"topic": ""}', 400, "INVALID_TOPIC"),
    (b'{"topic": "ok", "channel": "bad/channel"}', 400, "INVALID_CHANNEL"),
    (b'{"topic": 5}', 400, "json: cannot unmarshal number into Go struct field .topic of type string"),
    (b'{"channel": []}', 400, "json: cannot unmarshal array into Go struct field .channel of type string"),
    (b"[1]", 400, 'json: cannot unmarshal array into Go value of type struct { Topic string "json:\\"topic\\""; '
                  'Channel string "json:\\"channel\\"" }'),
])
def test_create_refuses_bad_bodies(api, body, status, message):
    assert error_of(api.post("/api/topics", content=body)) == (status, message)


def test_pause_unpause_and_empty_a_channel(cluster, api):
    topic_on(cluster, "ops", "worker", (4, 4))
    assert ok_json(api.post("/api/topics/ops/worker", json={"action": "pause"})) == {"message": ""}
    assert all(nsqd_stats(cluster, n, "ops")["channels"][0]["paused"] for n in (0, 1))
    assert ok_json(api.get("/api/topics/ops/worker"))["paused"] is True
    assert ok_json(api.post("/api/topics/ops/worker", json={"action": "empty"})) == {"message": ""}
    assert [nsqd_stats(cluster, n, "ops")["channels"][0]["depth"] for n in (0, 1)] == [0, 0]
    assert ok_json(api.post("/api/topics/ops/worker", json={"action": "unpause"})) == {"message": ""}
    assert not any(nsqd_stats(cluster, n, "ops")["channels"][0]["paused"] for n in (0, 1))


def test_pause_and_empty_a_topic(cluster, api):
    topic_on(cluster, "topic-ops", "c", (3, 5))
    assert ok_json(api.post("/api/topics/topic-ops", json={"action": "pause"})) == {"message": ""}
    assert all(nsqd_stats(cluster, n, "topic-ops")["paused"] for n in (0, 1))
    publish(cluster, 0, "topic-ops", 5)  # held in the paused topic
    assert nsqd_stats(cluster, 0, "topic-ops")["depth"] == 5
    assert ok_json(api.post("/api/topics/topic-ops", json={"action": "empty"})) == {"message": ""}
    assert nsqd_stats(cluster, 0, "topic-ops")["depth"] == 0
    assert ok_json(api.post("/api/topics/topic-ops", json={"action": "unpause"})) == {"message": ""}
    assert not nsqd_stats(cluster, 0, "topic-ops")["paused"]


@pytest.mark.parametrize("body, message", [(b'{"action": "explode"}', "INVALID_ACTION"), (b"{}", "INVALID_ACTION"),
                                           (b"", "EOF"), (b'"x"', "json: cannot unmarshal string into Go value of type "
                                                                 'struct { Action string "json:\\"action\\"" }')])
def test_bad_actions(api, body, message):
    assert error_of(api.post("/api/topics/orders", content=body)) == (400, message)
    assert error_of(api.post("/api/topics/orders/billing", content=body)) == (400, message)


def test_delete_channel_then_topic(cluster, api):
    topic_on(cluster, "doomed", "c1", (3, 5))
    topic_on(cluster, "doomed", "c2", (0,))
    assert ok_json(api.delete("/api/topics/doomed/c1")) == {"message": ""}
    assert [c["channel_name"] for c in nsqd_stats(cluster, 0, "doomed")["channels"]] == ["c2"]
    assert nsqd_stats(cluster, 1, "doomed")["channels"] == []
    assert ok_json(api.delete("/api/topics/doomed")) == {"message": ""}
    assert nsqd_stats(cluster, 0, "doomed") is None and nsqd_stats(cluster, 1, "doomed") is None
    assert "doomed" not in httpx.get(f"http://{cluster.lookupd_http}/topics").json()["topics"]


def test_tombstone_a_producer_of_a_topic(cluster, api):
    topic_on(cluster, "stoned", "c", (3, 5))
    answer = api.request("DELETE", f"/api/nodes/{cluster.node(1)}", json={"topic": "stoned"})
    assert ok_json(answer) == {"message": ""}
    assert nsqd_stats(cluster, 1, "stoned") is None and nsqd_stats(cluster, 0, "stoned") is not None
    producers = httpx.get(f"http://{cluster.lookupd_http}/lookup", params={"topic": "stoned"}).json()["producers"]
    assert [p["http_port"] for p in producers] == [cluster.nsqds[0].http_port]


@pytest.mark.parametrize("body, message", [(b"nope", "INVALID_BODY"), (b'{"topic": "a b"}', "INVALID_TOPIC"),
                                           (b"{}", "INVALID_TOPIC")])
def test_tombstone_refuses_bad_bodies(cluster, api, body, message):
    assert error_of(api.request("DELETE", f"/api/nodes/{cluster.node(0)}", content=body)) == (400, message)


def test_unknown_routes_and_methods(api):
    assert error_of(api.get("/api/nothing")) == (404, "NOT_FOUND")
    answer = api.patch("/api/topics")
    assert error_of(answer) == (405, "METHOD_NOT_ALLOWED")
    assert "GET" in answer.headers["Allow"] and "POST" in answer.headers["Allow"]


# -- /config and graphite -------------------------------------------------------------------


def test_config_reads_and_changes_options(cluster, api):
    assert ok_json(api.get("/config/nsqlookupd_http_addresses")) == [cluster.lookupd_http]
    assert ok_json(api.get("/config/http_client_request_timeout")) == 5_000_000_000
    assert ok_json(api.get("/config/log_level")) == 2
    assert ok_json(api.put("/config/log_level", content=b"debug")) == 1
    assert ok_json(api.put("/config/log_level", content=b"info")) == 2
    assert error_of(api.put("/config/log_level", content=b"loud")) == (400, "INVALID_VALUE")
    assert error_of(api.put("/config/log_level", content=b"")) == (413, "INVALID_VALUE")
    assert error_of(api.put("/config/base_path", content=b"/x")) == (400, "INVALID_OPTION")
    assert error_of(api.get("/config/no_such_option")) == (400, "INVALID_OPTION")
    assert error_of(api.put("/config/nsqlookupd_http_addresses", content=b'["no-port"]')) == (400, "INVALID_VALUE")
    listed = [cluster.lookupd_http, cluster.lookupd_http]
    assert ok_json(api.put("/config/nsqlookupd_http_addresses", json=listed)) == listed
    assert ok_json(api.put("/config/nsqlookupd_http_addresses", json=[cluster.lookupd_http])) == [cluster.lookupd_http]


def test_graphite_rate_arguments(api):
    assert error_of(api.get("/api/graphite")) == (400, "INVALID_ARG_METRIC")
    assert error_of(api.get("/api/graphite", params={"metric": "rate"})) == (400, "INVALID_ARG_TARGET")
    assert error_of(api.get("/api/graphite", params={"metric": "rate", "target": "x"})) == (500, "INTERNAL_ERROR")


# -- cross-site requests --------------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site", "Origin": "http://sub.example"},
    {"Referer": "http://evil.example/page.html"},
    {"Origin": "null"},
])
def test_cross_site_changes_are_refused(cluster, api, headers):
    topic_on(cluster, "guarded", "c", (3, 5))
    assert error_of(api.post("/api/topics/guarded/c", json={"action": "pause"}, headers=headers)) == (403, "FORBIDDEN")
    assert error_of(api.delete("/api/topics/guarded", headers=headers)) == (403, "FORBIDDEN")
    assert error_of(api.put("/config/log_level", content=b"debug", headers=headers)) == (403, "FORBIDDEN")
    assert nsqd_stats(cluster, 0, "guarded")["channels"][0]["paused"] is False


def test_same_origin_and_script_requests_may_change(cluster, api):
    topic_on(cluster, "allowed", "c", (3, 5))
    own = api.base_url.netloc.decode()
    for headers in ({}, {"Origin": f"http://{own}"}, {"Sec-Fetch-Site": "same-origin"},
                    {"Referer": f"http://{own}/topics/allowed"}, {"X-Forwarded-Host": "admin.example",
                                                                  "Origin": "https://admin.example"}):
        assert ok_json(api.post("/api/topics/allowed/c", json={"action": "pause"}, headers=headers)) == {"message": ""}
        assert ok_json(api.post("/api/topics/allowed/c", json={"action": "unpause"}, headers=headers)) == {"message": ""}
    assert ok_json(api.get("/api/topics", headers={"Origin": "http://evil.example"}))["message"] == ""
