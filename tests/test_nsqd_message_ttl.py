"""Message TTL (--msg-ttl, POST /topic/ttl) against real nsqd processes: messages older than their
topic's TTL are dropped before delivery and counted, never delivered; the sweep frees queues
nobody reads, disk included; per-topic TTLs survive restarts in nsqd.dat, which NSQ v1.3 still reads."""

import os
import time

import httpx
import pytest

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import (Server, bodies, dpub, drain, go_encoding, go_metadata, nsqd_dat, publish, queue_files,
                      queued_messages, receive, restart, subscribe, wait_until)

SWEPT = 2.5  # a sweep runs every second: one has run within this after a TTL passed


def stats(server: Server, topic: str) -> dict | None:
    document = httpx.get(f"{server.http}/stats", params={"format": "json", "topic": topic}).json()
    return (document["topics"] or [None])[0]


def post(server: Server, path: str, **params) -> httpx.Response:
    return httpx.post(f"{server.http}{path}", params=params)


async def test_off_by_default_nothing_expires_and_stats_have_nsqs_keys_only(tmp_path):
    server = Server(tmp_path)
    await publish(server.tcp_port, "old", [b"kept"])
    assert post(server, "/channel/create", topic="old", channel="c").status_code == 200
    topic = stats(server, "old")
    assert "msg_ttl" not in topic and "expired_count" not in topic["channels"][0]
    assert "expired" not in httpx.get(f"{server.http}/metrics").text
    assert [m.body for m in await drain(server.tcp_port, "old", "c", 1)] == [b"kept"]
    assert server.stop() == 0


async def test_a_backlog_nobody_reads_is_swept_from_memory_and_disk(tmp_path):
    server = Server(tmp_path, "--msg-ttl=500ms", "--mem-queue-size=3", "--max-bytes-per-file=100")
    assert post(server, "/topic/create", topic="idle").status_code == 200
    assert post(server, "/channel/create", topic="idle", channel="nobody").status_code == 200
    await publish(server.tcp_port, "idle", bodies("stale", 10))  # 3 in memory, 7 over several disk files
    assert len(queue_files(tmp_path, "idle:nobody")) > 2
    await wait_until(lambda: stats(server, "idle")["channels"][0]["depth"] == 0, timeout=SWEPT + 1,
                     what="the backlog swept")
    channel = stats(server, "idle")["channels"][0]
    assert (channel["expired_count"], channel["backend_depth"]) == (10, 0)
    assert len(queue_files(tmp_path, "idle:nobody")) <= 1  # files read past are deleted
    await publish(server.tcp_port, "idle", [b"fresh"])
    assert [m.body for m in await drain(server.tcp_port, "idle", "nobody", 1)] == [b"fresh"]
    assert server.stop() == 0
    assert queued_messages(tmp_path, "idle:nobody") == []  # go-diskqueue's format after the sweep


async def test_a_topic_without_channels_drops_its_own_expired_backlog(tmp_path):
    server = Server(tmp_path, "--msg-ttl=400ms", "--mem-queue-size=0")
    await publish(server.tcp_port, "waiting", bodies("w", 5))
    await wait_until(lambda: stats(server, "waiting")["depth"] == 0, timeout=SWEPT + 1, what="swept")
    topic = stats(server, "waiting")
    assert (topic["msg_ttl"], topic["expired_count"], topic["message_count"]) == (400, 5, 5)
    metrics = httpx.get(f"{server.http}/metrics").text
    assert 'nsq_topic_expired_total{topic="waiting"} 5' in metrics
    assert 'nsq_topic_msg_ttl_seconds{topic="waiting"} 0.4' in metrics
    client = await subscribe(server.tcp_port, "waiting", "late", rdy=10)
    await client.assert_no_frame(0.3)
    assert server.stop() == 0


async def test_a_message_coming_back_after_its_ttl_is_never_delivered_again(tmp_path):
    server = Server(tmp_path, "--msg-ttl=600ms")
    consumer = await subscribe(server.tcp_port, "jobs", "workers", rdy=5)
    await publish(server.tcp_port, "jobs", [b"slow job"])
    [held] = await receive(consumer, 1)
    time.sleep(0.7)  # deliberate: the TTL passes while the message is in flight
    await consumer.send(b"REQ " + held.id + b" 0\n")
    await consumer.assert_no_frame(0.5)
    channel = stats(server, "jobs")["channels"][0]
    assert (channel["expired_count"], channel["depth"], channel["in_flight_count"]) == (1, 0, 0)
    assert 'nsq_channel_expired_total{topic="jobs",channel="workers"} 1' in httpx.get(f"{server.http}/metrics").text
    assert server.stop() == 0


async def test_a_deferral_longer_than_the_ttl_is_dropped_when_due(tmp_path):
    server = Server(tmp_path, "--msg-ttl=300ms")
    consumer = await subscribe(server.tcp_port, "later", "c", rdy=5)
    await consumer.send(dpub("later", 600, b"too late") + dpub("later", 50, b"in time"))
    assert [await consumer.read_response() for _ in range(2)] == [b"OK", b"OK"]
    assert [m.body for m in await receive(consumer, 1)] == [b"in time"]
    await consumer.assert_no_frame(1.0)
    assert stats(server, "later")["channels"][0]["expired_count"] == 1
    assert server.stop() == 0


async def test_per_topic_ttl_over_http(tmp_path):
    server = Server(tmp_path, "--msg-ttl=1h")
    for topic in ("short", "forever", "usual"):
        assert post(server, "/topic/create", topic=topic).status_code == 200
    assert post(server, "/topic/ttl", topic="short", ttl="300ms").status_code == 200
    assert post(server, "/topic/ttl", topic="forever", ttl="0").status_code == 200
    assert [stats(server, t)["msg_ttl"] for t in ("short", "usual")] == [300, 3_600_000]
    assert "msg_ttl" not in stats(server, "forever")  # no TTL, nothing dropped: NSQ's keys only
    await publish(server.tcp_port, "short", [b"gone"])
    await wait_until(lambda: stats(server, "short")["expired_count"] == 1, timeout=SWEPT + 1, what="expired")
    assert post(server, "/topic/ttl", topic="short", ttl="default").status_code == 200
    assert stats(server, "short")["msg_ttl"] == 3_600_000
    assert server.stop() == 0


@pytest.mark.parametrize("params, status, message", [
    ({"ttl": "1s"}, 400, "MISSING_ARG_TOPIC"),
    ({"topic": "nope", "ttl": "1s"}, 404, "TOPIC_NOT_FOUND"),
    ({"topic": "t"}, 400, "MISSING_ARG_TTL"),
    ({"topic": "t", "ttl": "-1s"}, 400, "INVALID_ARG_TTL"),
    ({"topic": "t", "ttl": "10"}, 400, "INVALID_ARG_TTL"),  # a Go duration needs a unit
])
async def test_bad_ttl_requests(start_nsqd, params, status, message):
    nsqd = await start_nsqd()
    nsqd.get_topic("t")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
        answer = await http.post("/topic/ttl", params=params)
        assert (answer.status_code, answer.json()) == (status, {"message": message})
        assert (await http.get("/topic/ttl")).status_code == 405


async def test_a_topic_ttl_is_kept_in_nsqd_dat_which_nsq_still_reads(tmp_path):
    server = Server(tmp_path)
    assert post(server, "/topic/create", topic="orders").status_code == 200
    assert post(server, "/channel/create", topic="orders", channel="billing").status_code == 200
    assert post(server, "/topic/create", topic="plain").status_code == 200
    assert post(server, "/topic/ttl", topic="orders", ttl="1m30s").status_code == 200
    saved = (b'{"topics":[{"name":"orders","paused":false,"channels":[{"name":"billing","paused":false}],'
             b'"msg_ttl":90000},{"name":"plain","paused":false,"channels":null}],"version":"1.3.0"}')
    assert nsqd_dat(tmp_path) == saved  # saved before the answer
    # NSQ v1.3 reads the same topics and channels, and writes them back without the extra key
    expected = [("orders", False, [("billing", False)]), ("plain", False, [])]
    assert go_metadata(saved) == expected
    server = restart(server)
    assert stats(server, "orders")["msg_ttl"] == 90_000 and "msg_ttl" not in stats(server, "plain")
    assert server.stop() == 0
    (tmp_path / "nsqd.dat").write_bytes(go_encoding(expected))  # as NSQ left it
    server = Server(tmp_path)
    assert "msg_ttl" not in stats(server, "orders")
    assert server.stop() == 0
    assert nsqd_dat(tmp_path) == go_encoding(expected)


async def test_messages_kept_on_disk_across_a_restart_still_expire(tmp_path):
    server = Server(tmp_path, "--msg-ttl=1s")
    assert post(server, "/topic/create", topic="kept").status_code == 200
    assert post(server, "/channel/create", topic="kept", channel="c").status_code == 200
    await publish(server.tcp_port, "kept", bodies("k", 3))
    assert server.stop() == 0
    assert len(queued_messages(tmp_path, "kept:c")) == 3
    time.sleep(1.1)  # deliberate: the TTL passes while nsqd is stopped
    server = Server(tmp_path, "--msg-ttl=1s")
    consumer = await subscribe(server.tcp_port, "kept", "c", rdy=10)
    await consumer.assert_no_frame(0.5)
    assert stats(server, "kept")["channels"][0]["expired_count"] == 3
    assert server.stop() == 0
    assert os.path.exists(tmp_path / "nsqd.dat")
