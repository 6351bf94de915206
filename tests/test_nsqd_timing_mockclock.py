"""nsqd's timing rules under trio's MockClock, over in-memory streams: message timeouts, TOUCH
and its cap, REQ with a delay and its clamp, deferred messages (DPUB, and those a topic holds
until its first channel), heartbeats and the read deadline, and the output buffer's timeout.

Every clock nsqd reads is trio's (nsqd/io_backend.py), so with the autojump clock virtual time
jumps to the next deadline whenever every task waits: each rule is checked at its exact time,
not in a wall-clock window, and a test waits for no real second (each test takes pytest-trio's
``autojump_clock`` as an argument: that is how it runs under that clock). The clients are
trio.testing.memory_stream_pair() streams handed to nsqd as its listener would hand it an
accepted socket (NSQD.serve_connection), so they run on the portable backend; the protocol
side they exercise is the same for the fast path (nsqd/connection.py).
"""

import math
import struct

import pytest
import trio
import trio.testing

from common.commands import MAGIC_V2
from common.frames import FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, Frame
from common.message import decode_message
from nsqd.nsqd import NSQD
from nsqd.options import default_options

from .helpers import RawClient

HEARTBEAT = Frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")


class Broker:
    """An nsqd whose clients connect through in-memory streams."""

    def __init__(self, nsqd: NSQD, nursery: trio.Nursery):
        self.nsqd = nsqd
        self._nursery = nursery

    async def connect(self, **identify) -> RawClient:
        client_stream, server_stream = trio.testing.memory_stream_pair()
        self._nursery.start_soon(self.nsqd.serve_connection, server_stream)
        client = RawClient(client_stream)
        await client.send(MAGIC_V2)
        if identify:
            assert await client.identify(**identify) == b"OK"
        return client

    async def consumer(self, topic: str = "t", channel: str = "c", rdy: int = 1, **identify) -> RawClient:
        client = await self.connect(**identify)
        await client.sub(topic, channel, rdy=rdy)
        return client

    async def publish(self, *commands: bytes) -> None:
        producer = await self.connect()
        await producer.send(b"".join(commands))
        for _ in commands:
            assert await producer.read_response() == b"OK"
        await producer.close()


@pytest.fixture
async def start_broker(nursery, tmp_path_factory):
    async def start(**overrides) -> Broker:
        opts = default_options(tcp_address="127.0.0.1:0", http_address="",
                               data_path=str(tmp_path_factory.mktemp("nsqd")), **overrides)
        return Broker(await nursery.start(NSQD(opts).run), nursery)

    return start


@pytest.fixture
async def broker(start_broker) -> Broker:
    return await start_broker()


def pub(topic: str, body: bytes) -> bytes:
    return f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body


def dpub(topic: str, delay_ms: int, body: bytes) -> bytes:
    return f"DPUB {topic} {delay_ms}\n".encode() + struct.pack(">i", len(body)) + body


def since(start: float) -> float:
    return trio.current_time() - start


def exactly(seconds: float):
    return pytest.approx(seconds, abs=1e-6)


# -- in-flight timeouts and TOUCH ----------------------------------------------------------


@pytest.mark.parametrize("where", ["identify", "flag"])
async def test_a_message_in_flight_past_its_msg_timeout_is_delivered_again_then(autojump_clock, start_broker, where):
    broker = await start_broker(**({"msg_timeout": 1.0} if where == "flag" else {}))
    await broker.publish(pub("t", b"slow"))
    client = await broker.consumer(**({"msg_timeout": 1000} if where == "identify" else {}))
    first = await client.read_message()
    start = trio.current_time()
    again = await client.read_message()
    assert since(start) == exactly(1.0)
    assert (again.id, again.body, again.attempts) == (first.id, b"slow", 2)
    await client.send(b"FIN " + again.id + b"\n")  # the new delivery's
    await client.send(pub("other", b"x"))
    assert await client.read_response() == b"OK"


async def test_a_finished_message_never_comes_back(autojump_clock, start_broker):
    broker = await start_broker(msg_timeout=1.0)
    await broker.publish(pub("t", b"once"))
    client = await broker.consumer()
    await client.send(b"FIN " + (await client.read_message()).id + b"\n")
    await client.assert_no_frame(within=50)


async def test_a_timed_out_message_goes_to_another_consumer_and_the_first_may_no_longer_finish_it(
        autojump_clock, start_broker):
    broker = await start_broker(msg_timeout=1.0)
    await broker.publish(pub("t", b"slow"))
    stuck = await broker.consumer()
    first = await stuck.read_message()
    start = trio.current_time()
    await stuck.send(b"RDY 0\n")
    other = await broker.consumer()
    again = await other.read_message()
    assert since(start) == exactly(1.0)
    assert (again.id, again.attempts) == (first.id, 2)
    await stuck.send(b"FIN " + first.id + b"\n")
    assert await stuck.read_error() == b"E_FIN_FAILED FIN " + first.id + b" failed client does not own message"


async def test_touch_restarts_the_timeout_from_the_touch(autojump_clock, broker):
    await broker.publish(pub("t", b"touched"))
    client = await broker.consumer(msg_timeout=1000)
    first = await client.read_message()
    start = trio.current_time()
    await trio.sleep(0.6)
    await client.send(b"TOUCH " + first.id + b"\n")
    again = await client.read_message()
    assert since(start) == exactly(1.6)
    assert (again.id, again.attempts) == (first.id, 2)


async def test_touch_is_capped_by_max_msg_timeout_from_the_delivery(autojump_clock, start_broker):
    broker = await start_broker(msg_timeout=1.0, max_msg_timeout=1.4)
    await broker.publish(pub("t", b"capped"))
    client = await broker.consumer()
    first = await client.read_message()
    start = trio.current_time()
    await trio.sleep(0.7)
    await client.send(b"TOUCH " + first.id + b"\n")
    assert (await client.read_message()).id == first.id
    assert since(start) == exactly(1.4)


async def test_a_consumer_that_leaves_hands_its_messages_over_at_once(autojump_clock, broker):
    await broker.publish(pub("t", b"a"), pub("t", b"b"), pub("t", b"c"))
    leaving = await broker.consumer(rdy=3)
    held = [await leaving.read_message() for _ in range(3)]
    staying = await broker.consumer(rdy=3)
    start = trio.current_time()
    await leaving.close()
    got = [await staying.read_message() for _ in range(3)]
    assert since(start) == exactly(0)  # not after the 60 s msg_timeout
    assert {msg.id for msg in got} == {msg.id for msg in held}
    assert {msg.attempts for msg in got} == {2}


# -- REQ ---------------------------------------------------------------------------------


async def test_req_zero_delivers_again_at_once_with_one_more_attempt(autojump_clock, broker):
    await broker.publish(pub("t", b"again"))
    client = await broker.consumer()
    first = await client.read_message()
    for attempts in (2, 3, 4):
        start = trio.current_time()
        await client.send(b"REQ " + first.id + b" 0\n")
        msg = await client.read_message()
        assert since(start) == exactly(0)
        assert (msg.id, msg.body, msg.timestamp, msg.attempts) == (first.id, b"again", first.timestamp, attempts)


@pytest.mark.parametrize(("max_req_timeout", "asked_ms", "delay"), [(3600.0, 400, 0.4), (0.3, 3_600_000, 0.3)])
async def test_req_with_a_delay_delivers_again_after_it_clamped_to_max_req_timeout(
        autojump_clock, start_broker, max_req_timeout, asked_ms, delay):
    broker = await start_broker(max_req_timeout=max_req_timeout)
    await broker.publish(pub("t", b"later"))
    client = await broker.consumer()
    first = await client.read_message()
    start = trio.current_time()
    await client.send(b"REQ %s %d\n" % (first.id, asked_ms))
    again = await client.read_message()
    assert since(start) == exactly(delay)
    assert (again.id, again.attempts) == (first.id, 2)


async def test_a_deferred_message_frees_rdy_for_the_next_at_once(autojump_clock, broker):
    await broker.publish(pub("t", b"a"), pub("t", b"b"))
    client = await broker.consumer()
    first = await client.read_message()
    start = trio.current_time()
    await client.send(b"REQ " + first.id + b" 500\n")
    second = await client.read_message()
    assert since(start) == exactly(0) and second.body != first.body
    await client.send(b"FIN " + second.id + b"\n")
    assert (await client.read_message()).id == first.id
    assert since(start) == exactly(0.5)


# -- DPUB --------------------------------------------------------------------------------


@pytest.mark.parametrize("delay_ms", [0, 500, 300])
async def test_dpub_is_delivered_when_its_delay_is_over(autojump_clock, start_broker, delay_ms):
    broker = await start_broker(max_req_timeout=0.3 if delay_ms == 300 else 3600.0)
    client = await broker.consumer()
    start = trio.current_time()
    await broker.publish(dpub("t", delay_ms, b"later"))
    msg = await client.read_message()
    assert since(start) == exactly(delay_ms / 1000)
    assert (msg.body, msg.attempts) == (b"later", 1)


async def test_dpub_messages_come_out_in_due_order_to_every_channel(autojump_clock, broker):
    clients = {name: await broker.consumer(channel=name, rdy=10, output_buffer_size=-1) for name in ("a", "b")}
    start = trio.current_time()
    await broker.publish(dpub("t", 600, b"third"), dpub("t", 200, b"first"), dpub("t", 400, b"second"))
    arrivals = {name: [] for name in clients}

    async def read(name: str) -> None:
        for _ in range(3):
            arrivals[name].append(((await clients[name].read_message()).body, round(since(start), 6)))

    async with trio.open_nursery() as nursery:
        for name in clients:
            nursery.start_soon(read, name)
    expected = [(b"first", 0.2), (b"second", 0.4), (b"third", 0.6)]
    assert arrivals == {"a": expected, "b": expected}


async def test_a_topic_without_channels_holds_a_dpub_whose_delay_starts_when_a_channel_takes_it(autojump_clock, broker):
    """nsqd's topic keeps it in its queue; its messagePump starts the deferral in the channel."""
    await broker.publish(pub("t", b"plain"), dpub("t", 600, b"held"))
    await trio.sleep(5)  # far longer than the delay: it has not started
    start = trio.current_time()
    client = await broker.consumer(rdy=10, output_buffer_size=-1)
    assert (await client.read_message()).body == b"plain"
    assert since(start) == exactly(0)
    assert (await client.read_message()).body == b"held"
    assert since(start) == exactly(0.6)


# -- heartbeats and the read deadline ------------------------------------------------------


async def test_heartbeats_come_at_each_clients_own_interval_and_a_reply_keeps_it_connected(autojump_clock, broker):
    async def heartbeat_times(interval_ms: int, count: int) -> list[float]:
        client = await broker.connect(heartbeat_interval=interval_ms)
        start, arrivals = trio.current_time(), []
        while len(arrivals) < count:
            assert await client.read_any_frame(10) == HEARTBEAT
            arrivals.append(round(since(start), 6))
            await client.send(b"NOP\n")
        await client.close()
        return arrivals

    times = {}

    async def collect(interval_ms: int, count: int) -> None:
        times[interval_ms] = await heartbeat_times(interval_ms, count)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(collect, 2000, 3)
        nursery.start_soon(collect, 1000, 1)  # leaves after its first heartbeat
        nursery.start_soon(collect, 1500, 4)
    assert times == {2000: [2.0, 4.0, 6.0], 1000: [1.0], 1500: [1.5, 3.0, 4.5, 6.0]}


async def test_heartbeats_go_on_a_grid_of_a_64th_of_the_interval_then_exactly_an_interval_apart(
        autojump_clock, broker):
    await trio.sleep(0.3)  # off the grid: 19.2 steps of 1/64 s
    client = await broker.connect(heartbeat_interval=1000)
    connected, arrivals = trio.current_time(), []
    while len(arrivals) < 4:
        assert await client.read_any_frame(10) == HEARTBEAT
        arrivals.append(trio.current_time())
        await client.send(b"NOP\n")
    first = math.floor((connected + 1) * 64) / 64  # the grid point before the 1 s the client asked for
    assert 1 - 1 / 64 < first - connected < 1
    assert arrivals == [exactly(first + n) for n in range(4)]


async def test_a_silent_client_off_the_grid_is_still_closed_exactly_two_intervals_on(autojump_clock, broker):
    await trio.sleep(0.3)
    client = await broker.connect(heartbeat_interval=1000)
    connected, arrivals = trio.current_time(), []
    with pytest.raises(EOFError):
        while True:
            assert await client.read_any_frame(10) == HEARTBEAT
            arrivals.append(trio.current_time())
    assert since(connected) == exactly(2.0)
    first = math.floor((connected + 1) * 64) / 64  # on the grid, early; the second, a hair before the close
    assert arrivals == [exactly(first), exactly(first + 1)]


async def test_heartbeats_keep_coming_while_subscribed(autojump_clock, broker):
    client = await broker.consumer(heartbeat_interval=1000)
    start = trio.current_time()
    assert await client.read_any_frame(10) == HEARTBEAT
    assert since(start) == exactly(1.0)


async def test_a_client_silent_for_two_heartbeat_intervals_is_closed_then(autojump_clock, broker):
    client = await broker.connect(heartbeat_interval=1000)
    start = trio.current_time()
    assert await client.read_any_frame(10) == HEARTBEAT
    with pytest.raises(EOFError):
        await client.read_any_frame(10)
    assert since(start) == exactly(2.0)
    with trio.fail_after(1):
        while broker.nsqd.connections:
            await trio.sleep(0.01)


async def test_the_read_deadline_runs_from_the_last_read(autojump_clock, broker):
    client = await broker.connect(heartbeat_interval=1000)
    start = trio.current_time()
    await trio.sleep(1.5)
    await client.send(b"NOP\n")
    frames = []
    with pytest.raises(EOFError):
        while True:
            frames.append(await client.read_any_frame(10))
    assert since(start) == exactly(3.5)
    assert frames == [HEARTBEAT] * 3  # at 1, 2 and 3 s


# -- the output buffer's timeout ------------------------------------------------------------


@pytest.mark.parametrize(("identify", "flushed_after"), [
    ({}, 0.25),  # --output-buffer-timeout's default
    ({"output_buffer_timeout": 1000}, 1.0),
    ({"output_buffer_size": 64, "output_buffer_timeout": 30000}, 0.0),  # the buffer filled
    ({"output_buffer_size": -1}, 0.0),  # no buffering
])
async def test_a_message_a_consumer_could_take_more_after_waits_for_the_output_buffer(
        autojump_clock, broker, identify, flushed_after):
    client = await broker.consumer(rdy=5, **identify)
    start = trio.current_time()
    await broker.publish(pub("t", b"b" * 100))
    assert (await client.read_message()).body == b"b" * 100
    assert since(start) == exactly(flushed_after)


async def test_a_consumer_that_can_take_no_more_gets_its_messages_at_once(autojump_clock, broker):
    client = await broker.consumer(rdy=2, output_buffer_timeout=30000)
    start = trio.current_time()
    await broker.publish(pub("t", b"1"))
    await broker.publish(pub("t", b"2"))
    frames = [await client.read_any_frame(60) for _ in range(2)]
    assert [decode_message(frame.data).body for frame in frames] == [b"1", b"2"]
    assert {frame.frame_type for frame in frames} == {FRAME_TYPE_MESSAGE}
    assert since(start) == exactly(0)  # the second filled RDY: both went together, at once


async def test_a_consumer_that_lowers_rdy_gets_what_is_buffered_at_once(autojump_clock, broker):
    """nsqd's messagePump flushes a client that is no longer ready."""
    client = await broker.consumer(rdy=5, output_buffer_timeout=30000)
    await broker.publish(pub("t", b"x"))
    await trio.sleep(10)
    start = trio.current_time()
    await client.send(b"RDY 0\n")
    assert (await client.read_message()).body == b"x"
    assert since(start) == exactly(0)
