"""nsqd over real sockets: PUB, MPUB and DPUB, and the messages they produce
(NSQ v1.3's nsqd/protocol_v2.go, nsqd/message.go)."""

import re
import struct
import time

import trio

from .helpers import RawClient

HEX_ID = re.compile(rb"[0-9a-f]{16}")


def pub(topic: str, body: bytes) -> bytes:
    return f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body


def mpub(topic: str, bodies: list[bytes]) -> bytes:
    payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    return f"MPUB {topic}\n".encode() + struct.pack(">i", len(payload)) + payload


async def publish(port: int, *commands: bytes) -> None:
    """Send commands from a connection of its own and expect one OK each."""
    client = await RawClient.connect(port)
    await client.send(b"".join(commands))
    for _ in commands:
        assert await client.read_response() == b"OK"
    await client.close()


async def consumer(port: int, topic: str, channel: str, rdy: int) -> RawClient:
    client = await RawClient.connect(port)
    await client.sub(topic, channel, rdy=rdy)
    return client


async def test_pub_answers_ok_and_delivers_the_exact_message(nsqd):
    client = await consumer(nsqd.tcp_port, "t", "c", rdy=1)
    before = time.time_ns()
    await publish(nsqd.tcp_port, pub("t", b"hello world"))
    after = time.time_ns()
    msg = await client.read_message()
    assert msg.body == b"hello world"
    assert msg.attempts == 1
    assert HEX_ID.fullmatch(msg.id)
    assert before <= msg.timestamp <= after


async def test_message_frame_layout_on_the_wire(nsqd):
    client = await consumer(nsqd.tcp_port, "t", "c", rdy=1)
    await publish(nsqd.tcp_port, pub("t", b"abc"))
    with trio.fail_after(5):
        data = b""
        while len(data) < 8 + 26 + 3:
            data += await client.stream.receive_some(65536)
    size, frame_type = struct.unpack(">ii", data[:8])
    assert (size, frame_type, len(data)) == (4 + 26 + 3, 2, 8 + 26 + 3)
    timestamp, attempts = struct.unpack(">qH", data[8:18])
    assert abs(timestamp - time.time_ns()) < 5 * 10**9
    assert attempts == 1
    assert HEX_ID.fullmatch(data[18:34])
    assert data[34:] == b"abc"


async def test_binary_body_round_trips_byte_for_byte(nsqd):
    body = bytes(range(256)) * 4 + b"\nPUB x\n\r\n"
    client = await consumer(nsqd.tcp_port, "t", "c", rdy=1)
    await publish(nsqd.tcp_port, pub("t", body))
    assert (await client.read_message()).body == body


async def test_message_of_exactly_max_msg_size_is_accepted(start_nsqd):
    nsqd = await start_nsqd(max_msg_size=1000)
    client = await consumer(nsqd.tcp_port, "t", "c", rdy=1)
    await publish(nsqd.tcp_port, pub("t", b"m" * 1000))
    assert (await client.read_message()).body == b"m" * 1000


async def test_large_message_arrives_in_many_tcp_segments(nsqd):
    body = bytes(range(256)) * 4096  # 1 MiB, the default --max-msg-size
    client = await consumer(nsqd.tcp_port, "t", "c", rdy=1)
    publisher = await RawClient.connect(nsqd.tcp_port)
    command = pub("t", body)
    for start in range(0, len(command), 1000):
        await publisher.send(command[start : start + 1000])
    assert await publisher.read_response() == b"OK"
    assert (await client.read_message()).body == body


async def test_ids_are_unique_across_messages_and_topics(nsqd):
    first = await consumer(nsqd.tcp_port, "t1", "c", rdy=200)
    second = await consumer(nsqd.tcp_port, "t2", "c", rdy=200)
    await publish(nsqd.tcp_port, *[pub("t1", b"%d" % i) for i in range(100)],
                  mpub("t2", [b"%d" % i for i in range(100)]))
    ids = [(await first.read_message()).id for _ in range(100)]
    ids += [(await second.read_message()).id for _ in range(100)]
    assert all(HEX_ID.fullmatch(msg_id) for msg_id in ids)
    assert len(set(ids)) == 200


async def test_pipelined_pubs_each_get_ok_in_order(nsqd):
    publisher = await RawClient.connect(nsqd.tcp_port)
    await publisher.send(b"".join(pub("t", b"%d" % i) for i in range(500)) + b"NOP\n")
    for _ in range(500):
        assert await publisher.read_response() == b"OK"
    await publisher.assert_no_frame(0.2)


async def test_crlf_line_endings_are_accepted(nsqd):
    publisher = await RawClient.connect(nsqd.tcp_port)
    await publisher.send(b"NOP\r\nPUB t\r\n\x00\x00\x00\x02hi")
    assert await publisher.read_response() == b"OK"
    client = await consumer(nsqd.tcp_port, "t", "c", rdy=1)
    assert (await client.read_message()).body == b"hi"


async def test_a_subscribed_client_may_publish(nsqd):
    client = await consumer(nsqd.tcp_port, "t", "c", rdy=0)
    await client.send(pub("other", b"x"))
    assert await client.read_response() == b"OK"


async def test_mpub_of_many_messages(nsqd):
    bodies = [b"message %d " % i + b"x" * (i % 50) for i in range(2000)]
    await publish(nsqd.tcp_port, mpub("t", bodies))
    client = await consumer(nsqd.tcp_port, "t", "c", rdy=2500)
    got = [await client.read_message() for _ in bodies]
    assert sorted(msg.body for msg in got) == sorted(bodies)
    assert {msg.attempts for msg in got} == {1}
    assert len({msg.id for msg in got}) == len(bodies)
    await client.assert_no_frame(0.3)


async def test_mpub_of_one_message(nsqd):
    client = await consumer(nsqd.tcp_port, "t", "c", rdy=1)
    await publish(nsqd.tcp_port, mpub("t", [b"only"]))
    msg = await client.read_message()
    assert (msg.body, msg.attempts) == (b"only", 1)


async def test_mpub_messages_share_a_timestamp_close_to_now(nsqd):
    client = await consumer(nsqd.tcp_port, "t", "c", rdy=10)
    before = time.time_ns()
    await publish(nsqd.tcp_port, mpub("t", [b"a", b"b", b"c"]))
    after = time.time_ns()
    got = [await client.read_message() for _ in range(3)]
    assert all(before <= msg.timestamp <= after for msg in got)