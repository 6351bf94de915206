"""nsqd over real sockets: RDY flow control, FIN/REQ/TOUCH, timeouts, CLS and fan-out
(NSQ v1.3's nsqd/protocol_v2.go, nsqd/channel.go)."""

import struct

import httpx
import trio

from common.commands import Mpub
from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, Frame
from common.message import Message, decode_message

from .helpers import RawClient


def pub(topic: str, body: bytes) -> bytes:
    return f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body


async def publish(port: int, topic: str, *bodies: bytes) -> None:
    """PUB each body from a connection of its own."""
    client = await RawClient.connect(port)
    await client.send(b"".join(pub(topic, body) for body in bodies))
    for _ in bodies:
        assert await client.read_response() == b"OK"
    await client.close()


async def consumer(port: int, topic: str = "t", channel: str = "c", rdy: int | None = None,
                   **identify) -> RawClient:
    client = await RawClient.connect(port)
    if identify:
        assert await client.identify(**identify) == b"OK"
    await client.sub(topic, channel, rdy=rdy)
    return client


async def read_messages(client: RawClient, count: int, timeout: float = 5.0) -> list[Message]:
    return [await client.read_message(timeout) for _ in range(count)]


async def fin(client: RawClient, msg: Message) -> None:
    await client.send(b"FIN " + msg.id + b"\n")


# -- RDY -------------------------------------------------------------------------


async def test_rdy_caps_messages_in_flight(nsqd):
    await publish(nsqd.tcp_port, "t", *[b"%d" % i for i in range(10)])
    client = await consumer(nsqd.tcp_port, rdy=3)
    held = await read_messages(client, 3)
    await client.assert_no_frame(0.3)
    received = list(held)
    while held:
        await fin(client, held.pop(0))
        if len(received) < 10:
            msg = await client.read_message()
            received.append(msg)
            held.append(msg)
        await client.assert_no_frame(0.05)
    assert sorted(msg.body for msg in received) == sorted(b"%d" % i for i in range(10))


async def test_rdy_without_count_means_one(nsqd):
    await publish(nsqd.tcp_port, "t", b"a", b"b")
    client = await consumer(nsqd.tcp_port)
    await client.send(b"RDY\n")
    await client.read_message()
    await client.assert_no_frame(0.3)


async def test_no_delivery_before_rdy(nsqd):
    await publish(nsqd.tcp_port, "t", b"a")
    client = await consumer(nsqd.tcp_port)
    await client.assert_no_frame(0.3)
    await client.send(b"RDY 1\n")
    assert (await client.read_message()).body == b"a"


async def test_rdy_zero_stops_delivery(nsqd):
    await publish(nsqd.tcp_port, "t", *[b"%d" % i for i in range(5)])
    client = await consumer(nsqd.tcp_port, rdy=2)
    held = await read_messages(client, 2)
    await client.send(b"RDY 0\n")
    for msg in held:
        await fin(client, msg)
    await client.assert_no_frame(0.4)
    await client.send(b"RDY 1\n")
    await client.read_message()
    await client.assert_no_frame(0.2)


async def test_a_read_is_applied_whole_before_the_client_is_refilled(nsqd):
    """FIN or REQ then RDY 0 in one read: no message in between, as NSQ's nsqd (its messagePump
    sees the RDY 0 before it sends again; tests/test_differential_nsqd_tcp.py has the two side by side)."""
    await publish(nsqd.tcp_port, "t", b"a", b"b")
    client = await consumer(nsqd.tcp_port, rdy=1)
    msg = await client.read_message()
    unknown = b"0123456789abcdef"
    await client.send(b"REQ " + msg.id + b" 0\nRDY 0\nFIN " + unknown + b"\n")  # the FIN's error ends the read
    assert (await client.read_error()).startswith(b"E_FIN_FAILED")
    await client.send(b"RDY 1\n")
    msg = await client.read_message()
    await client.send(b"FIN " + msg.id + b"\nRDY 0\nFIN " + unknown + b"\n")
    assert (await client.read_error()).startswith(b"E_FIN_FAILED")
    await client.send(b"RDY 5\n")  # what the RDY 0 kept back comes now
    assert (await client.read_message()).body in {b"a", b"b"}
    await client.assert_no_frame(0.1)


async def test_raising_rdy_delivers_more_at_once(nsqd):
    await publish(nsqd.tcp_port, "t", *[b"%d" % i for i in range(5)])
    client = await consumer(nsqd.tcp_port, rdy=1)
    await client.read_message()
    await client.assert_no_frame(0.2)
    await client.send(b"RDY 5\n")
    await read_messages(client, 4, timeout=1.0)


async def test_rdy_up_to_max_rdy_count_is_accepted(start_nsqd):
    nsqd = await start_nsqd(max_rdy_count=5)
    await publish(nsqd.tcp_port, "t", *[b"%d" % i for i in range(6)])
    client = await consumer(nsqd.tcp_port, rdy=5)
    await read_messages(client, 5)
    await client.assert_no_frame(0.3)


async def test_rdy_above_max_rdy_count_is_fatal(start_nsqd):
    nsqd = await start_nsqd(max_rdy_count=5)
    client = await consumer(nsqd.tcp_port)
    await client.send(b"RDY 6\n")
    assert await client.read_error() == b"E_INVALID RDY count 6 out of range 0-5"
    await client.assert_closed()


async def test_identify_sub_and_rdy_pipelined_in_one_write(nsqd):
    await publish(nsqd.tcp_port, "t", b"a", b"b")
    client = await RawClient.connect(nsqd.tcp_port)
    body = b'{"msg_timeout": 1000}'
    await client.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body + b"SUB t c\nRDY 2\n")
    assert await client.read_response() == b"OK"
    assert await client.read_response() == b"OK"
    assert sorted(m.body for m in await read_messages(client, 2)) == [b"a", b"b"]


async def test_sample_rate_delivers_a_sample_and_drops_the_rest(nsqd):
    # nsqd skips a message when rand(0..99) > sample_rate: about 11 % get through at 10
    client = await consumer(nsqd.tcp_port, rdy=2500, sample_rate=10)
    await publish(nsqd.tcp_port, "t", *[b"%d" % i for i in range(1000)])
    delivered = 0
    with trio.move_on_after(0.6):
        while True:
            await client.read_message()
            delivered += 1
    assert 40 <= delivered <= 220, delivered
    other = await consumer(nsqd.tcp_port, rdy=10)
    await other.assert_no_frame(0.3)  # the skipped ones are gone from the channel


# -- FIN / REQ / TOUCH -----------------------------------------------------------


async def test_msg_timeout_option_redelivers(start_nsqd):
    """Over a real socket; the timing rules are checked at their exact times in
    tests/test_nsqd_timing_mockclock.py."""
    nsqd = await start_nsqd(msg_timeout=1.0)
    await publish(nsqd.tcp_port, "t", b"slow")
    client = await consumer(nsqd.tcp_port, rdy=1)
    first = await client.read_message()
    start = trio.current_time()
    msg = await client.read_message()
    assert trio.current_time() - start >= 1.0  # never early (late only on a busy machine)
    assert (msg.id, msg.attempts) == (first.id, 2)


async def test_unknown_id_gives_non_fatal_errors(nsqd):
    client = await consumer(nsqd.tcp_port, rdy=1)
    unknown = b"0123456789abcdef"
    await client.send(b"FIN " + unknown + b"\n")
    assert await client.read_error() == b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"
    await client.send(b"REQ " + unknown + b" 0\n")
    assert await client.read_error() == b"E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight"
    await client.send(b"TOUCH " + unknown + b"\n")
    assert await client.read_error() == b"E_TOUCH_FAILED TOUCH 0123456789abcdef failed ID not in flight"
    await publish(nsqd.tcp_port, "t", b"still working")
    msg = await client.read_message()
    assert msg.body == b"still working"
    await fin(client, msg)
    await client.send(b"PUB u\n\x00\x00\x00\x01x")
    assert await client.read_response() == b"OK"


async def test_fin_twice_fails_the_second_time(nsqd):
    await publish(nsqd.tcp_port, "t", b"x")
    client = await consumer(nsqd.tcp_port, rdy=1)
    msg = await client.read_message()
    await fin(client, msg)
    await fin(client, msg)
    assert await client.read_error() == b"E_FIN_FAILED FIN " + msg.id + b" failed ID not in flight"


async def test_id_owned_by_another_client(nsqd):
    await publish(nsqd.tcp_port, "t", b"mine")
    owner = await consumer(nsqd.tcp_port, rdy=1)
    msg = await owner.read_message()
    thief = await consumer(nsqd.tcp_port, rdy=1)
    for command, code in ((b"FIN", b"E_FIN_FAILED"), (b"REQ", b"E_REQ_FAILED"), (b"TOUCH", b"E_TOUCH_FAILED")):
        await thief.send(command + b" " + msg.id + (b" 0\n" if command == b"REQ" else b"\n"))
        assert await thief.read_error() == code + b" " + command + b" " + msg.id + b" failed client does not own message"
    await fin(owner, msg)
    await owner.send(b"NOP\n")
    await owner.assert_no_frame(0.2)
    await thief.assert_no_frame(0.2)


# -- CLS -------------------------------------------------------------------------


async def test_cls_answers_close_wait_and_stops_delivery(nsqd):
    await publish(nsqd.tcp_port, "t", b"held")
    client = await consumer(nsqd.tcp_port, rdy=5)
    held = await client.read_message()
    await client.send(b"CLS\n")
    assert await client.read_response() == b"CLOSE_WAIT"
    await publish(nsqd.tcp_port, "t", b"after cls")
    await client.send(b"RDY 5\n")  # ignored after CLS
    await client.assert_no_frame(0.4)
    await fin(client, held)
    await client.send(b"NOP\n")
    await client.assert_no_frame(0.2)
    other = await consumer(nsqd.tcp_port, rdy=1)
    assert (await other.read_message()).body == b"after cls"


async def test_req_and_touch_allowed_after_cls(nsqd):
    await publish(nsqd.tcp_port, "t", b"a", b"b")
    client = await consumer(nsqd.tcp_port, rdy=2)
    first, second = await read_messages(client, 2)
    await client.send(b"CLS\n")
    assert await client.read_response() == b"CLOSE_WAIT"
    await client.send(b"TOUCH " + first.id + b"\nREQ " + first.id + b" 0\nFIN " + second.id + b"\n")
    await client.assert_no_frame(0.3)
    other = await consumer(nsqd.tcp_port, rdy=1)
    msg = await other.read_message()
    assert (msg.id, msg.attempts) == (first.id, 2)


async def test_server_keeps_the_connection_after_cls(nsqd):
    client = await consumer(nsqd.tcp_port, rdy=1)
    await client.send(b"CLS\n")
    assert await client.read_response() == b"CLOSE_WAIT"
    await client.send(b"PUB t\n\x00\x00\x00\x01x")
    assert await client.read_response() == b"OK"


# -- disconnects and fan-out ------------------------------------------------------


async def test_two_channels_each_get_every_message(nsqd):
    first = await consumer(nsqd.tcp_port, "t", "a", rdy=100)
    second = await consumer(nsqd.tcp_port, "t", "b", rdy=100)
    bodies = [b"%d" % i for i in range(50)]
    await publish(nsqd.tcp_port, "t", *bodies)
    first_got = await read_messages(first, 50)
    second_got = await read_messages(second, 50)
    assert sorted(m.body for m in first_got) == sorted(m.body for m in second_got) == sorted(bodies)
    assert {m.id for m in first_got} == {m.id for m in second_got}
    await first.assert_no_frame(0.3)
    await second.assert_no_frame(0.01)


async def test_two_consumers_on_one_channel_split_the_messages(nsqd):
    consumers = [await consumer(nsqd.tcp_port, rdy=10) for _ in range(2)]
    bodies = [b"%d" % i for i in range(100)]
    await publish(nsqd.tcp_port, "t", *bodies)
    received: list[list[bytes]] = [[], []]

    async def drain(index: int, done: trio.CancelScope) -> None:
        client = consumers[index]
        while True:
            msg = await client.read_message(timeout=30.0)
            received[index].append(msg.body)
            await fin(client, msg)
            if len(received[0]) + len(received[1]) == len(bodies):
                done.cancel()

    with trio.fail_after(30):  # a failure bound: the two consumers take all 100 between them
        async with trio.open_nursery() as nursery:
            for index in range(2):
                nursery.start_soon(drain, index, nursery.cancel_scope)
    assert sorted(received[0] + received[1]) == sorted(bodies)
    assert received[0] and received[1]


async def wait_for_ready_counts(nsqd, topic: str, counts: list[int]) -> None:
    """Until /stats shows the consumers of ``topic`` with these RDY counts (their RDY applied)."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}", timeout=5) as http:
        with trio.fail_after(10):
            while True:
                document = (await http.get("/stats", params={"format": "json", "topic": topic})).json()
                clients = [client for stats in document["topics"] for channel in stats["channels"]
                           for client in channel["clients"]]
                if sorted(client["ready_count"] for client in clients) == sorted(counts):
                    return
                await trio.sleep(0.01)


async def test_ready_consumers_are_dealt_runs_of_an_mpub_in_turn_within_their_rdy(nsqd):
    """A channel deals its ready consumers a run of the messages each, in the order they became
    ready (an even share of those left, as many as RDY allows), and a lone message round-robin."""
    consumers = []
    for rdy in (10, 100, 100):
        consumers.append(await consumer(nsqd.tcp_port, topic="deal", rdy=rdy))
        await wait_for_ready_counts(nsqd, "deal", [10, 100, 100][:len(consumers)])
    producer = await RawClient.connect(nsqd.tcp_port)
    await producer.send(Mpub("deal", [b"%d" % i for i in range(150)]).to_bytes())
    assert await producer.read_response() == b"OK"
    runs = [(0, 10), (10, 80), (80, 150)]  # 10 (its RDY), then 70 and 70: half of the 140 left each
    for client, (first, end) in zip(consumers, runs):
        assert [msg.body for msg in await read_messages(client, end - first)] == [b"%d" % i for i in range(first, end)]
    for body in (b"lone 1", b"lone 2"):
        await producer.send(pub("deal", body))
        assert await producer.read_response() == b"OK"
    assert (await consumers[1].read_message()).body == b"lone 1"
    assert (await consumers[2].read_message()).body == b"lone 2"
    await consumers[0].assert_no_frame(0.3)  # it holds its RDY's worth


async def test_topic_without_channel_holds_messages(nsqd):
    await publish(nsqd.tcp_port, "t", b"1", b"2", b"3")
    assert (nsqd.topics["t"].depth, nsqd.topics["t"].channels) == (3, {})
    client = await consumer(nsqd.tcp_port, rdy=10)
    got = await read_messages(client, 3)
    assert sorted(m.body for m in got) == [b"1", b"2", b"3"]


async def test_new_channel_gets_only_later_messages(nsqd):
    first = await consumer(nsqd.tcp_port, "t", "a", rdy=10)
    await publish(nsqd.tcp_port, "t", b"early")
    assert (await first.read_message()).body == b"early"
    second = await consumer(nsqd.tcp_port, "t", "b", rdy=10)
    await publish(nsqd.tcp_port, "t", b"late")
    assert (await first.read_message()).body == b"late"
    assert (await second.read_message()).body == b"late"
    await second.assert_no_frame(0.3)


async def test_channel_keeps_messages_while_it_has_no_consumer(nsqd):
    client = await consumer(nsqd.tcp_port, rdy=1)
    await client.close()
    await publish(nsqd.tcp_port, "t", b"kept")
    client = await consumer(nsqd.tcp_port, rdy=1)
    assert (await client.read_message()).body == b"kept"


async def test_max_channel_consumers(start_nsqd):
    nsqd = await start_nsqd(max_channel_consumers=1)
    first = await consumer(nsqd.tcp_port)
    refused = await RawClient.connect(nsqd.tcp_port)
    await refused.send(b"SUB t c\n")
    assert await refused.read_error() == b"E_SUB_FAILED SUB failed consumers for t:c exceeds limit of 1"
    await refused.assert_closed()
    await consumer(nsqd.tcp_port, "t", "other")  # the limit is per channel
    await first.close()
    with trio.fail_after(2):
        while True:  # the first consumer's slot frees once nsqd sees it leave
            retry = await RawClient.connect(nsqd.tcp_port)
            await retry.send(b"SUB t c\n")
            if await retry.read_frame() == (0, b"OK"):
                break
            await trio.sleep(0.05)  # a poll loop's pace


async def test_fins_in_one_write_keep_a_lone_fins_answers_and_order(nsqd):
    """Consecutive FINs are finished as a batch; one that fails in the middle is answered and the
    rest go on. The messages they freed come once the whole read is applied, so after the error
    (as NSQ's nsqd sends them, but for a rare race of its message pump)."""
    await publish(nsqd.tcp_port, "t", *[b"m%d" % n for n in range(6)])
    client = await consumer(nsqd.tcp_port, rdy=2)
    first, second = await read_messages(client, 2)
    unknown = b"0123456789abcdef"
    await client.send(b"FIN " + first.id + b"\nFIN " + unknown + b"\nFIN " + second.id + b"\n")
    frames = [await client.read_frame() for _ in range(3)]
    assert frames[0] == Frame(FRAME_TYPE_ERROR, b"E_FIN_FAILED FIN " + unknown + b" failed ID not in flight")
    assert [frame.frame_type for frame in frames[1:]] == [FRAME_TYPE_MESSAGE, FRAME_TYPE_MESSAGE]
    third, fourth = (decode_message(frame.data) for frame in frames[1:])
    assert (third.body, fourth.body) == (b"m2", b"m3")
    await client.send(b"FIN " + third.id + b"\r\nFIN " + fourth.id + b"\n")  # a \r\n line ends a run
    assert [msg.body for msg in await read_messages(client, 2)] == [b"m4", b"m5"]
    await client.assert_no_frame(0.2)
