"""nsqd over real sockets: misbehaving clients lose their own connection and nothing else.

After each case a second client on the same server must still publish, subscribe and
receive normally, and the daemon must have forgotten the offending connection.
"""

import socket
import struct

import pytest
import trio

from common.frames import FRAME_TYPE_ERROR, Frame

from .helpers import RawClient
from .waiting import await_until


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def assert_server_healthy(nsqd) -> None:
    """A fresh client can publish, subscribe and get a message; no stale connection remains."""
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"PUB healthy\n" + sized(b"ping"))
    assert await client.read_response() == b"OK"
    await client.sub("healthy", "check", rdy=1)
    msg = await client.read_message()
    assert msg.body == b"ping"
    await client.send(b"FIN " + msg.id + b"\n")
    await client.close()
    await wait_for_no_connections(nsqd)


async def wait_for_no_connections(nsqd, timeout: float = 10.0) -> None:
    await await_until(lambda: not nsqd.connections, timeout, "nsqd without connections")


async def frames_until_closed(client: RawClient, timeout: float = 5.0) -> list[Frame]:
    """Every frame nsqd sends before it closes the connection."""
    frames = []
    with trio.fail_after(timeout):
        while True:
            try:
                frames.append(await client.read_frame(timeout))
            except (EOFError, trio.BrokenResourceError):
                return frames


async def test_garbage_after_magic(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"\x00\x01\x02\xff garbage \x7f\r\n\x00more garbage\n")
    assert await frames_until_closed(client) == [
        Frame(FRAME_TYPE_ERROR, b"E_INVALID invalid command \x00\x01\x02\xff")]
    await assert_server_healthy(nsqd)


async def test_garbage_instead_of_magic(nsqd):
    client = await RawClient.connect(nsqd.tcp_port, magic=False)
    await client.send(bytes(range(256)) * 64)
    assert await frames_until_closed(client) == [Frame(FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL")]
    await assert_server_healthy(nsqd)


async def test_garbage_without_newline_then_disconnect(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"\xde\xad\xbe\xef" * 1000)
    await client.close()
    await assert_server_healthy(nsqd)


@pytest.mark.parametrize("partial", [
    b"",
    b" ",
    b"  V",
    b"  V2SUB t",
    b"  V2PUB t\n",
    b"  V2PUB t\n\x00\x00",
    b"  V2PUB t\n\x00\x00\x00\x10abc",
    b"  V2MPUB t\n\x00\x00\x00\x20\x00\x00\x00\x02",
    b"  V2DPUB t 100\n\x00\x00\x00\x05ab",
    b"  V2IDENTIFY\n\x00\x00\x00\x40{\"client_id\"",
])
async def test_half_sent_command_then_disconnect(nsqd, partial):
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=10)
    client = await RawClient.connect(nsqd.tcp_port, magic=False)
    await client.send(partial)
    await await_until(lambda: len(nsqd.connections) == 2, what="the partial client accepted")
    await client.close()
    await consumer.assert_no_frame(0.2)  # nothing was published
    await consumer.close()
    await assert_server_healthy(nsqd)


async def test_disconnect_without_closing_handshake(nsqd):
    """A reset (SO_LINGER 0) while nsqd has messages to write."""
    sock = trio.socket.socket()
    await sock.connect(("127.0.0.1", nsqd.tcp_port))
    client = RawClient(trio.SocketStream(sock))
    await client.send(b"  V2")
    await client.send(b"MPUB t\n" + sized(struct.pack(">i", 500) + b"".join(sized(b"x" * 100) for _ in range(500))))
    assert await client.read_response() == b"OK"
    await client.sub("t", "c", rdy=500)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=500)
    bodies = [(await consumer.read_message()).body for _ in range(500)]
    assert bodies == [b"x" * 100] * 500
    await consumer.close()
    await assert_server_healthy(nsqd)


async def test_over_long_line_without_newline(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    with trio.move_on_after(5):
        try:
            for _ in range(64):  # 64 KiB, well past nsqd's 16 KiB line buffer
                await client.send(b"A" * 1024)
        except trio.BrokenResourceError:
            pass
    frames = await frames_until_closed(client)
    assert all(frame.frame_type == FRAME_TYPE_ERROR for frame in frames), frames
    await assert_server_healthy(nsqd)


async def test_long_line_within_the_limit_is_accepted(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"NOP" + b" x" * 5000 + b"\nPUB t\n" + sized(b"x"))
    assert await client.read_response() == b"OK"


@pytest.mark.parametrize(("command", "expected"), [
    (b"PUB t\n", b"E_BAD_MESSAGE PUB message too big 2147483647 > 1048576"),
    (b"DPUB t 10\n", b"E_BAD_MESSAGE DPUB message too big 2147483647 > 1048576"),
    (b"MPUB t\n", b"E_BAD_BODY MPUB body too big 2147483647 > 5242880"),
    (b"IDENTIFY\n", b"E_BAD_BODY IDENTIFY body too big 2147483647 > 5242880"),
    (b"AUTH\n", b"E_BAD_BODY AUTH body too big 2147483647 > 5242880"),
])
async def test_huge_size_prefix_is_refused_at_once(nsqd, command, expected):
    client = await RawClient.connect(nsqd.tcp_port)
    start = trio.current_time()
    await client.send(command + struct.pack(">i", 2**31 - 1) + b"only a little of the body")
    assert await client.read_error() == expected
    assert trio.current_time() - start < 0.5
    await client.assert_closed()
    await assert_server_healthy(nsqd)


async def test_huge_mpub_message_size_inside_a_small_body(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"MPUB t\n" + sized(struct.pack(">ii", 1, 2**31 - 1)))
    assert await client.read_error() == b"E_BAD_MESSAGE MPUB message too big 2147483647 > 1048576"
    await client.assert_closed()
    await assert_server_healthy(nsqd)


async def test_publisher_that_never_reads_its_responses(nsqd):
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", nsqd.tcp_port))
    flooder = RawClient(trio.SocketStream(sock))
    await flooder.send(b"  V2")
    assert await flooder.identify(heartbeat_interval=1000) == b"OK"
    batch = (b"PUB flood\n" + sized(b"x")) * 10000
    closed = trio.Event()

    async def flood() -> None:
        try:
            while True:
                await flooder.send(batch)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            closed.set()

    (connection,) = nsqd.connections
    most_buffered = 0

    async def watch_unsent_output() -> None:
        nonlocal most_buffered
        while True:
            most_buffered = max(most_buffered, len(connection.client.out))
            await trio.sleep(0.005)  # deliberate: a sampler of the output buffer while the flood runs

    async with trio.open_nursery() as nursery:
        nursery.start_soon(flood)
        nursery.start_soon(watch_unsent_output)
        await await_until(lambda: most_buffered > 0, what="OKs backing up for the flooder that does not read them")
        # the flooder is stuck, everyone else is served
        other = await RawClient.connect(nsqd.tcp_port)
        await other.send(b"PUB other\n" + sized(b"fine"))
        assert await other.read_response() == b"OK"
        await other.close()
        with trio.fail_after(10):
            await closed.wait()
        nursery.cancel_scope.cancel()
    # nsqd stopped reading the flooder instead of buffering OKs without bound
    assert most_buffered < 2 * 1024 * 1024
    await assert_server_healthy(nsqd)


async def test_consumer_that_never_reads_is_dropped(nsqd):
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", nsqd.tcp_port))
    stuck = RawClient(trio.SocketStream(sock))
    await stuck.send(b"  V2")
    assert await stuck.identify(heartbeat_interval=1000) == b"OK"
    await stuck.sub("t", "c", rdy=2500)
    publisher = await RawClient.connect(nsqd.tcp_port)
    body = b"y" * 10000
    await publisher.send(b"MPUB t\n" + sized(struct.pack(">i", 300) + b"".join(sized(body) for _ in range(300))))
    assert await publisher.read_response() == b"OK"
    # nsqd's write deadline is one heartbeat interval (1 s)
    await await_until(lambda: len(nsqd.connections) == 1, what="the stuck consumer dropped")
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=300)
    got = [await consumer.read_message() for _ in range(300)]
    assert {msg.body for msg in got} == {body}
    assert len({msg.id for msg in got}) == 300
    await publisher.close()
    await consumer.close()
    stuck.stream.socket.close()
    await assert_server_healthy(nsqd)


async def test_many_clients_connecting_and_disconnecting(nsqd):
    count = 30
    publisher = await RawClient.connect(nsqd.tcp_port)
    await publisher.send(b"MPUB churn\n" + sized(
        struct.pack(">i", count) + b"".join(sized(b"%d" % i) for i in range(count))))
    assert await publisher.read_response() == b"OK"
    await publisher.close()

    async def hit_and_run(index: int) -> None:
        kind = index % 5
        client = await RawClient.connect(nsqd.tcp_port, magic=kind != 0)
        if kind == 1:
            await client.send(b"PUB side\n" + sized(b"x"))
            assert await client.read_response() == b"OK"
        elif kind == 2:  # take messages and leave without FIN
            await client.sub("churn", "c", rdy=3)
            await client.read_message()
        elif kind == 3:
            await client.send(b"BOGUS\n")
        elif kind == 4:
            await client.send(b"SUB churn")
        await client.close()

    for _ in range(3):
        async with trio.open_nursery() as nursery:
            for index in range(100):
                nursery.start_soon(hit_and_run, index)
    await wait_for_no_connections(nsqd)
    # every message taken by a departed consumer came back: nothing lost, nothing doubled
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("churn", "c", rdy=100)
    bodies = sorted([(await consumer.read_message()).body for _ in range(count)])
    assert bodies == sorted(b"%d" % i for i in range(count))
    await consumer.assert_no_frame(0.3)
    await consumer.close()
    await wait_for_no_connections(nsqd)
    assert nsqd.topics["churn"].channels["c"].clients == {}
    await assert_server_healthy(nsqd)
