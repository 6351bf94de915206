"""What a topic without channels holds, as NSQ v1.3's topic does (nsqd/topic.go): every message
it accepted, deferred ones included, counts in its depth until a channel takes the backlog; a
deferred message's delay starts when it reaches the channel (messagePump's PutMessageDeferred)."""

import struct

import httpx
import pytest
import trio

from .helpers import RawClient

DEFER_MS = 600


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@pytest.fixture
async def http(nsqd):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}", timeout=5) as client:
        yield client


async def topic_stats(http, topic: str) -> dict:
    document = (await http.get("/stats", params={"format": "json", "topic": topic})).json()
    (found,) = [entry for entry in document["topics"] if entry["topic_name"] == topic]
    return found


async def publish_backlog(nsqd) -> None:
    """49 PUB, an MPUB of 2 and a DPUB: 52 messages for a topic that has no channel."""
    producer = await RawClient.connect(nsqd.tcp_port)
    for index in range(49):
        await producer.send(b"PUB t\n" + sized(b"pub%d" % index))
    await producer.send(b"MPUB t\n" + sized(struct.pack(">i", 2) + sized(b"mpub0") + sized(b"mpub1")))
    await producer.send(b"DPUB t %d\n" % DEFER_MS + sized(b"deferred"))
    for _ in range(51):
        assert await producer.read_response() == b"OK"
    await producer.close()


async def test_dpub_to_a_topic_without_channels_counts_in_its_depth(nsqd, http):
    await publish_backlog(nsqd)
    stats = await topic_stats(http, "t")
    assert (stats["depth"], stats["message_count"], stats["channels"]) == (52, 52, [])
    assert "[t              ] depth: 52    be-depth: 0     msgs: 52" in (await http.get("/stats")).text
    metrics = (await http.get("/metrics")).text
    assert 'nsq_topic_depth{topic="t"} 52' in metrics


async def test_held_deferred_message_waits_its_delay_from_when_a_channel_takes_it(nsqd, http):
    await publish_backlog(nsqd)
    await trio.sleep(DEFER_MS / 1000 + 0.2)  # longer than the delay: it must not have started yet
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=100)
    subscribed = trio.current_time()
    bodies = [(await consumer.read_message()).body for _ in range(51)]
    assert bodies == [b"pub%d" % index for index in range(49)] + [b"mpub0", b"mpub1"]
    topic = await topic_stats(http, "t")
    assert topic["depth"] == 0
    (channel,) = topic["channels"]
    assert (channel["deferred_count"], channel["message_count"], channel["depth"]) == (1, 52, 0)
    # On a loaded machine reading the backlog can take longer than the delay itself; the arrival
    # time checked below is what shows the delay started at the subscription.
    await consumer.assert_no_frame(max(0.0, DEFER_MS / 1000 - 0.25 - (trio.current_time() - subscribed)))
    message = await consumer.read_message(timeout=2)
    assert message.body == b"deferred"
    assert trio.current_time() - subscribed >= DEFER_MS / 1000 - 0.05
    await consumer.close()


async def test_emptying_the_topic_drops_its_held_deferred_message(nsqd, http):
    await publish_backlog(nsqd)
    assert (await http.post("/topic/empty", params={"topic": "t"})).status_code == 200
    assert (await topic_stats(http, "t"))["depth"] == 0
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=10)
    await consumer.assert_no_frame(DEFER_MS / 1000 + 0.2)
    await consumer.close()
