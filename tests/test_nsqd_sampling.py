"""IDENTIFY sample_rate (NSQ v1.2, nsqd/protocol_v2.go): nsqd's messagePump skips a message when
rand.Int31n(100) > sample_rate, so a rate of N delivers (N + 1) % of the messages, and a
skipped message is gone: never in flight, never redelivered, to this client or another."""

import struct

import httpx
import trio

from .helpers import RawClient

TOTAL = 10_000
BATCH = 1_000


def mpub(topic: str, bodies: list[bytes]) -> bytes:
    payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(body)) + body for body in bodies)
    return f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload


async def publish(port: int, count: int) -> None:
    client = await RawClient.connect(port)
    for start in range(0, count, BATCH):
        await client.send(mpub("t", [b"%d" % i for i in range(start, min(count, start + BATCH))]))
        assert await client.read_response() == b"OK"
    await client.close()


async def sampled_consumer(port: int, sample_rate: int, rdy: int = 2500, msg_timeout: int = 1000) -> RawClient:
    client = await RawClient.connect(port)
    assert await client.identify(sample_rate=sample_rate, msg_timeout=msg_timeout) == b"OK"
    await client.sub("t", "c", rdy=rdy)
    return client


async def channel_stats(nsqd) -> dict:
    async with httpx.AsyncClient() as http:
        document = (await http.get(f"http://127.0.0.1:{nsqd.http_port}/stats?format=json")).json()
    return document["topics"][0]["channels"][0]


async def consume_everything(nsqd, client: RawClient) -> set[bytes]:
    """FIN whatever arrives until the channel has handed out all it got and nothing is in flight."""
    bodies: set[bytes] = set()
    with trio.fail_after(30):
        while True:
            msg = None
            with trio.move_on_after(0.3):
                msg = await client.read_message()
            if msg is not None:
                assert msg.attempts == 1 and msg.body not in bodies  # never a redelivery
                bodies.add(msg.body)
                await client.send(b"FIN " + msg.id + b"\n")
                continue
            stats = await channel_stats(nsqd)
            if stats["message_count"] == TOTAL and stats["depth"] == 0 and stats["in_flight_count"] == 0:
                return bodies


async def read_until_quiet(client: RawClient) -> list:
    messages = []
    with trio.move_on_after(0.5):
        while True:
            messages.append(await client.read_message())
    return messages


async def test_sample_rate_50_delivers_about_half_and_drops_the_rest_for_good(nsqd):
    # RDY 200 and a 3 s msg_timeout: a loaded machine still FINs each message in time
    client = await sampled_consumer(nsqd.tcp_port, 50, rdy=200, msg_timeout=3000)
    await publish(nsqd.tcp_port, TOTAL)
    delivered = await consume_everything(nsqd, client)
    # NSQ's rule delivers 51 %: mean 5,100, standard deviation 50; the bounds are 12 deviations away
    assert 0.45 * TOTAL <= len(delivered) <= 0.55 * TOTAL, len(delivered)

    await trio.sleep(3.2)  # past the 3 s msg_timeout: a skipped message was never in flight to time out
    await client.assert_no_frame(0.1)
    other = await RawClient.connect(nsqd.tcp_port)
    await other.sub("t", "c", rdy=100)
    await other.assert_no_frame(0.3)  # nor is it left in the channel for another consumer
    stats = await channel_stats(nsqd)
    [client_stats, _] = sorted(stats["clients"], key=lambda c: -c["message_count"])
    assert (client_stats["sample_rate"], client_stats["message_count"], client_stats["finish_count"]) == (
        50, len(delivered), len(delivered))
    assert (stats["depth"], stats["requeue_count"], stats["timeout_count"]) == (0, 0, 0)


async def test_sample_rate_99_delivers_everything(nsqd):
    """rand(0..99) is never > 99: the deterministic edge of NSQ's rule."""
    client = await sampled_consumer(nsqd.tcp_port, 99, rdy=200)
    await publish(nsqd.tcp_port, 2_000)
    bodies = set()
    for _ in range(2_000):
        msg = await client.read_message()
        bodies.add(msg.body)
        await client.send(b"FIN " + msg.id + b"\n")
    assert len(bodies) == 2_000


async def test_sample_rate_applies_to_requeued_messages_too(nsqd):
    """A REQ'd message goes back through the channel and is sampled again on redelivery."""
    client = await sampled_consumer(nsqd.tcp_port, 20)
    await publish(nsqd.tcp_port, 2_000)
    first = await read_until_quiet(client)
    await client.send(b"".join(b"REQ " + msg.id + b" 0\n" for msg in first))
    again = await read_until_quiet(client)
    assert all(msg.attempts == 2 for msg in again)
    # ~21 % of 2,000 first (about 420, sd 18), then ~21 % of those (about 88, sd 8)
    assert 300 <= len(first) <= 550 and 30 <= len(again) <= 160, (len(first), len(again))
