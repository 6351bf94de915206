"""nsqd's /stats over real HTTP (NSQ v1.3's nsqd/stats.go, nsqd/http.go): the JSON document key by key against a
v1.3 document written from NSQ's Go structs (tests/fixtures/nsq_v13_stats.json), the
filters, and the text layout line by line with NSQ's fmt strings."""

import json
import re
import struct
import time
from pathlib import Path

import httpx
import pytest
import trio

from .helpers import RawClient

FIXTURE = Path(__file__).parent / "fixtures" / "nsq_v13_stats.json"
MEMORY_KEYS = ["heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes", "gc_pause_usec_100",
               "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes", "gc_total_runs"]
NO_LATENCY = {"count": 0, "percentiles": None}
DURATION = r"(\d+h)?(\d+m)?\d+(\.\d+)?(s|ms|µs|ns)"


@pytest.fixture
async def http(nsqd):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}", timeout=5) as client:
        yield client


async def get_stats(http, **params) -> dict:
    response = await http.get("/stats", params={"format": "json", **params})
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    assert response.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    return response.json()


async def get_text(http, **params) -> list[str]:
    response = await http.get("/stats", params=params)
    assert response.status_code == 200
    assert response.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    return response.text.split("\n")


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def identified(nsqd, name: str, user_agent: str) -> RawClient:
    client = await RawClient.connect(nsqd.tcp_port)
    assert await client.identify(client_id=name, hostname=f"{name}.example.com", user_agent=user_agent) == b"OK"
    return client


async def publish(client: RawClient, topic: str, *bodies: bytes) -> None:
    for body in bodies:
        await client.send(f"PUB {topic}\n".encode() + sized(body))
        assert await client.read_response() == b"OK"


def local_port(client: RawClient) -> int:
    return client.stream.socket.getsockname()[1]


def json_type(value) -> str:
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (list, "list"), (dict, "dict")):
        if isinstance(value, kind):
            return name
    assert value is None, value
    return "null"


def assert_same_shape(ours, nsq, path: str = "$") -> None:
    """Same keys in the same order at every level, and the same JSON types."""
    assert json_type(ours) == json_type(nsq), f"{path}: {json_type(ours)} where NSQ has {json_type(nsq)}"
    if isinstance(nsq, dict):
        assert list(ours) == list(nsq), f"{path}: keys differ"
        for key, value in nsq.items():
            assert_same_shape(ours[key], value, f"{path}.{key}")
    elif isinstance(nsq, list):
        assert len(ours) == len(nsq), f"{path}: {len(ours)} items where the fixture has {len(nsq)}"
        for index, (mine, theirs) in enumerate(zip(ours, nsq)):
            assert_same_shape(mine, theirs, f"{path}[{index}]")


# -- the JSON document ------------------------------------------------------------------------


async def test_json_document_has_nsqs_keys_types_and_order(nsqd, http):
    before = int(time.time())
    consumer = await identified(nsqd, "worker-1", "test-consumer/1.0")
    await consumer.sub("orders", "billing", rdy=1)
    producer = await identified(nsqd, "api-3", "test-producer/1.0")
    await publish(producer, "orders", b"order #1")
    assert (await consumer.read_message()).body == b"order #1"
    after = int(time.time())

    document = await get_stats(http)
    assert_same_shape(document, json.loads(FIXTURE.read_text()))

    assert (document["version"], document["health"], document["start_time"]) == ("1.3.0", "OK", nsqd.start_time)
    [topic] = document["topics"]
    [channel] = topic.pop("channels")
    assert topic == {"topic_name": "orders", "depth": 0, "backend_depth": 0, "message_count": 1,
                     "message_bytes": 8, "paused": False, "e2e_processing_latency": NO_LATENCY}
    [client] = channel.pop("clients")
    assert channel == {"channel_name": "billing", "depth": 0, "backend_depth": 0, "in_flight_count": 1,
                       "deferred_count": 0, "message_count": 1, "requeue_count": 0, "timeout_count": 0,
                       "client_count": 1, "paused": False, "e2e_processing_latency": NO_LATENCY}
    assert before <= client.pop("connect_ts") <= after
    assert client == {
        "client_id": "worker-1", "hostname": "worker-1.example.com", "version": "V2",
        "remote_address": f"127.0.0.1:{local_port(consumer)}", "state": 3, "ready_count": 1, "in_flight_count": 1,
        "message_count": 1, "finish_count": 0, "requeue_count": 0, "sample_rate": 0, "deflate": False,
        "snappy": False, "user_agent": "test-consumer/1.0", "tls": False, "tls_cipher_suite": "", "tls_version": "",
        "tls_negotiated_protocol": "", "tls_negotiated_protocol_is_mutual": False}
    [producer_stats] = document["producers"]
    assert before <= producer_stats.pop("connect_ts") <= after
    assert producer_stats == {
        "client_id": "api-3", "hostname": "api-3.example.com", "version": "V2",
        "remote_address": f"127.0.0.1:{local_port(producer)}", "state": 0, "ready_count": 0, "in_flight_count": 0,
        "message_count": 0, "finish_count": 0, "requeue_count": 0, "sample_rate": 0, "deflate": False,
        "snappy": False, "user_agent": "test-producer/1.0", "pub_counts": [{"topic": "orders", "count": 1}],
        "tls": False, "tls_cipher_suite": "", "tls_version": "", "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False}
    assert all(type(document["memory"][key]) is int and document["memory"][key] >= 0 for key in MEMORY_KEYS)


async def test_empty_daemon(nsqd, http):
    document = await get_stats(http)
    assert list(document) == ["version", "health", "start_time", "topics", "memory", "producers"]
    assert (document["topics"], document["producers"]) == ([], None)


async def test_counters_follow_fin_req_and_defer(nsqd, http):
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=2)
    producer = await RawClient.connect(nsqd.tcp_port)
    await publish(producer, "t", b"a", b"bb")
    await producer.send(b"DPUB t 60000\n" + sized(b"ccc"))
    assert await producer.read_response() == b"OK"
    first, second = await consumer.read_message(), await consumer.read_message()
    await consumer.send(b"FIN " + first.id + b"\n" + b"REQ " + second.id + b" 0\n")
    assert (await consumer.read_message()).body == second.body  # redelivered at once

    document = await get_stats(http)
    [topic] = document["topics"]
    [channel] = topic["channels"]
    [client] = channel["clients"]
    assert (topic["message_count"], topic["message_bytes"]) == (3, 6)
    assert {key: channel[key] for key in ("depth", "in_flight_count", "deferred_count", "message_count",
                                          "requeue_count", "timeout_count")} == {
        "depth": 0, "in_flight_count": 1, "deferred_count": 1, "message_count": 3, "requeue_count": 1,
        "timeout_count": 0}
    assert {key: client[key] for key in ("ready_count", "in_flight_count", "message_count", "finish_count",
                                         "requeue_count")} == {
        "ready_count": 2, "in_flight_count": 1, "message_count": 3, "finish_count": 1, "requeue_count": 1}
    assert document["producers"][0]["pub_counts"] == [{"topic": "t", "count": 3}]


async def test_topics_and_channels_are_sorted_by_name(nsqd, http):
    for topic in ("b", "a", "c"):
        assert (await http.post(f"/topic/create?topic={topic}")).status_code == 200
    for channel in ("z", "x", "y"):
        assert (await http.post(f"/channel/create?topic=b&channel={channel}")).status_code == 200
    document = await get_stats(http)
    assert [topic["topic_name"] for topic in document["topics"]] == ["a", "b", "c"]
    assert [channel["channel_name"] for channel in document["topics"][1]["channels"]] == ["x", "y", "z"]


async def test_consumer_and_producer_omit_empty_omitempty_keys(nsqd, http):
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c")
    producer = await RawClient.connect(nsqd.tcp_port)
    await publish(producer, "t", b"x")
    document = await get_stats(http)
    [consumer_stats] = document["topics"][0]["channels"][0]["clients"]
    [producer_stats] = document["producers"]
    omitempty = {"authed", "auth_identity", "auth_identity_url", "pub_counts"}
    assert omitempty.isdisjoint(consumer_stats)
    assert omitempty & set(producer_stats) == {"pub_counts"}


# -- filters ------------------------------------------------------------------------------------


async def test_include_clients_false_nulls_clients_and_producers(nsqd, http):
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c")
    producer = await RawClient.connect(nsqd.tcp_port)
    await publish(producer, "t", b"x")
    for value in ("false", "0"):
        document = await get_stats(http, include_clients=value)
        channel = document["topics"][0]["channels"][0]
        assert (channel["clients"], channel["client_count"], document["producers"]) == (None, 1, None)
    for value in ("true", "1", "yes", ""):  # anything else keeps the default
        document = await get_stats(http, include_clients=value)
        assert len(document["topics"][0]["channels"][0]["clients"]) == 1
        assert len(document["producers"]) == 1


async def test_include_mem_false_leaves_memory_out(nsqd, http):
    for value in ("false", "0"):
        assert list(await get_stats(http, include_mem=value)) == ["version", "health", "start_time", "topics",
                                                                  "producers"]
    assert "memory" in await get_stats(http, include_mem="no")


async def test_topic_and_channel_filters(nsqd, http):
    for topic, channel in (("a", "c1"), ("a", "c2"), ("b", "c2"), ("c", "c3")):
        assert (await http.post(f"/topic/create?topic={topic}")).status_code == 200
        assert (await http.post(f"/channel/create?topic={topic}&channel={channel}")).status_code == 200

    def names(document) -> list:
        return [(topic["topic_name"], [channel["channel_name"] for channel in topic["channels"]])
                for topic in document["topics"]]

    assert names(await get_stats(http, topic="a")) == [("a", ["c1", "c2"])]
    assert names(await get_stats(http, topic="a", channel="c2")) == [("a", ["c2"])]
    assert names(await get_stats(http, channel="c2")) == [("a", ["c2"]), ("b", ["c2"])]
    assert names(await get_stats(http, topic="a", channel="c3")) == []
    assert names(await get_stats(http, channel="nosuch")) == []
    document = await get_stats(http, topic="nosuch")
    assert (document["topics"], document["producers"]) == (None, None)


async def test_producers_are_every_client_that_published_with_counts_for_the_filtered_topic(nsqd, http):
    """nsqd's GetStats lists each publishing connection; Stats(topic) keeps the matching pub_counts only."""
    both = await RawClient.connect(nsqd.tcp_port)
    await publish(both, "a", b"1", b"2")
    await publish(both, "b", b"3")
    only_b = await RawClient.connect(nsqd.tcp_port)
    await publish(only_b, "b", b"4")
    await (await RawClient.connect(nsqd.tcp_port)).sub("a", "c")  # a consumer is no producer

    def by_port(document) -> dict:
        return {int(client["remote_address"].rsplit(":", 1)[1]): client.get("pub_counts")
                for client in document["producers"]}

    assert by_port(await get_stats(http, topic="a")) == {local_port(both): [{"topic": "a", "count": 2}],
                                                         local_port(only_b): None}
    assert by_port(await get_stats(http, topic="b")) == {local_port(both): [{"topic": "b", "count": 1}],
                                                         local_port(only_b): [{"topic": "b", "count": 1}]}
    assert by_port(await get_stats(http))[local_port(only_b)] == [{"topic": "b", "count": 1}]


async def test_consumer_pub_counts_follow_the_topic_filter(nsqd, http):
    client = await RawClient.connect(nsqd.tcp_port)
    await publish(client, "a", b"1")
    await publish(client, "b", b"2", b"3")
    await client.sub("b", "c")
    [stats] = (await get_stats(http, topic="b"))["topics"][0]["channels"][0]["clients"]
    assert stats["pub_counts"] == [{"topic": "b", "count": 2}]


async def test_deleted_topic_filter_gives_null_topics_and_producers(nsqd, http):
    producer = await RawClient.connect(nsqd.tcp_port)
    await publish(producer, "gone", b"x")
    assert (await http.post("/topic/delete?topic=gone")).status_code == 200
    document = await get_stats(http, topic="gone")
    assert (document["topics"], document["producers"]) == (None, None)
    assert len((await get_stats(http))["producers"]) == 1


async def test_paused_states_are_reported(nsqd, http):
    assert (await http.post("/topic/create?topic=t")).status_code == 200
    assert (await http.post("/channel/create?topic=t&channel=c")).status_code == 200
    assert (await http.post("/topic/pause?topic=t")).status_code == 200
    assert (await http.post("/channel/pause?topic=t&channel=c")).status_code == 200
    topic = (await get_stats(http))["topics"][0]
    assert (topic["paused"], topic["channels"][0]["paused"]) == (True, True)


async def test_malformed_query_is_invalid_request(http):
    for query in ("topic=%zz", "format=json;x"):
        response = await http.get(f"/stats?{query}")
        assert (response.status_code, response.json()) == (400, {"message": "INVALID_REQUEST"})


# -- the text format --------------------------------------------------------------------------


def rfc3339(unix_seconds: int) -> str:
    """Go's time.Format(time.RFC3339) of a local time."""
    local = time.localtime(unix_seconds)
    offset = local.tm_gmtoff
    zone = "Z" if offset == 0 else "%s%02d:%02d" % ("+" if offset > 0 else "-", abs(offset) // 3600,
                                                      abs(offset) % 3600 // 60)
    return time.strftime("%Y-%m-%dT%H:%M:%S", local) + zone


def assert_header_lines(lines: list[str], nsqd) -> None:
    assert re.fullmatch(r"nsqd v1\.3\.0 \(built w/\S+\)", lines[0]), lines[0]
    assert lines[1] == f"start_time {rfc3339(nsqd.start_time)}"
    assert re.fullmatch(f"uptime {DURATION}", lines[2]), lines[2]
    assert lines[3:5] == ["", "Health: OK"]


def split_connected(line: str) -> str:
    """The line without its " connected: <duration>" tail, which must be a whole-second Go duration."""
    head, _, connected = line.rpartition(" connected: ")
    assert re.fullmatch(r"(\d+h)?(\d+m)?\d+s", connected), line
    return head


async def test_text_layout_of_an_empty_daemon(nsqd, http):
    lines = await get_text(http, include_mem="false")
    assert_header_lines(lines, nsqd)
    assert lines[5:] == ["", "Topics: None", "", "Producers: None", ""]


async def test_text_memory_block(nsqd, http):
    lines = await get_text(http)
    assert lines[5:7] == ["", "Memory:"]
    assert [re.sub(r"\t\d+$", "\t<n>", line) for line in lines[7:16]] == ["   %-25s\t<n>" % key for key in MEMORY_KEYS]
    assert lines[16:] == ["", "Topics: None", "", "Producers: None", ""]


TOPIC_LINE = "%s[%-15s] depth: %-5d be-depth: %-5d msgs: %-8d e2e%%: %s"
CHANNEL_LINE = ("%s[%-25s] depth: %-5d be-depth: %-5d inflt: %-4d def: %-4d re-q: %-5d timeout: %-5d "
                "msgs: %-8d e2e%%: %s")
CONSUMER_LINE = "[%s %-21s] state: %d inflt: %-4d rdy: %-4d fin: %-8d re-q: %-8d msgs: %-8d"
PRODUCER_LINE = "[%s %-21s] msgs: %-8d topics: %s"


async def test_text_topics_channels_clients_and_producers(nsqd, http):
    consumer = await identified(nsqd, "worker", "test/1.0")
    await consumer.sub("alpha", "c", rdy=1)
    producer = await identified(nsqd, "api", "pub/2.0")
    await publish(producer, "alpha", b"one", b"two")
    assert (await consumer.read_message()).body == b"one"
    assert (await http.post("/channel/create?topic=alpha&channel=long-channel-name.archive")).status_code == 200
    assert (await http.post("/channel/pause?topic=alpha&channel=long-channel-name.archive")).status_code == 200
    assert (await http.post("/mpub?topic=beta", content=b"1\n2\n3")).status_code == 200
    assert (await http.post("/topic/pause?topic=beta")).status_code == 200

    lines = await get_text(http, include_mem="false")
    assert_header_lines(lines, nsqd)
    assert [split_connected(lines[9]), split_connected(lines[15])] == [
        "        " + CONSUMER_LINE % ("V2", f"worker.example.com:{local_port(consumer)} test/1.0", 3, 1, 1, 0, 0, 1),
        "   " + PRODUCER_LINE % ("V2", f"api.example.com:{local_port(producer)} pub/2.0", 2, "alpha=2")]
    lines[9] = lines[15] = "<client>"
    assert lines[5:] == [
        "", "Topics:",
        TOPIC_LINE % ("   ", "alpha", 0, 0, 2, ""),
        CHANNEL_LINE % ("      ", "c", 1, 0, 1, 0, 0, 0, 2, ""),
        "<client>",
        CHANNEL_LINE % ("   *P ", "long-channel-name.archive", 0, 0, 0, 0, 0, 0, 0, ""),
        "",
        TOPIC_LINE % ("*P ", "beta", 3, 0, 3, ""),
        "", "Producers:",
        "<client>",
        ""]


async def test_text_filters_and_include_clients(nsqd, http):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub("a", "c")
    await publish(client, "a", b"x")  # the consumer's connection is a producer too
    assert (await http.post("/topic/create?topic=b")).status_code == 200
    ident = f"127.0.0.1:{local_port(client)} "  # no IDENTIFY: the remote host, no user agent

    lines = await get_text(http, topic="b", include_mem="0")
    # a producer with no pub_counts for the filtered topic is still listed, in the consumer layout
    assert split_connected(lines[-2]) == "   " + CONSUMER_LINE % ("V2", ident, 3, 0, 0, 0, 0, 0)
    assert lines[5:-2] == ["", "Topics:", TOPIC_LINE % ("   ", "b", 0, 0, 0, ""), "", "Producers:"]

    lines = await get_text(http, topic="a", include_mem="0")
    assert split_connected(lines[-2]) == "   " + PRODUCER_LINE % ("V2", ident, 1, "a=1")
    # ClientV2Stats.String() picks the layout by pub_counts, under a channel too
    assert split_connected(lines[9]) == "        " + PRODUCER_LINE % ("V2", ident, 1, "a=1")

    lines = await get_text(http, include_clients="false", include_mem="0")
    assert lines[5:] == ["", "Topics:",
                         TOPIC_LINE % ("   ", "a", 0, 0, 1, ""),
                         CHANNEL_LINE % ("      ", "c", 1, 0, 0, 0, 0, 0, 1, ""),
                         "",
                         TOPIC_LINE % ("   ", "b", 0, 0, 0, ""),
                         "", "Producers: None", ""]
    lines = await get_text(http, topic="nosuch", include_mem="0")
    assert lines[5:] == ["", "Topics: None", "", "Producers: None", ""]


async def test_text_is_the_default_for_any_format_but_json(nsqd, http):
    for params in ({}, {"format": "text"}, {"format": "JSON"}, {"format": ""}):
        lines = await get_text(http, **params)
        assert lines[0].startswith("nsqd v1.3.0 ")


async def test_uptime_grows(nsqd, http):
    await trio.sleep(1.1)  # deliberate: a second of uptime
    uptime = (await get_text(http))[2]
    assert re.fullmatch(r"uptime \d+(\.\d+)?s", uptime) and float(uptime[7:-1]) >= 1.0, uptime
