"""nsqd's fast path's poller (nsqd/epoll_backend.py) over real sockets: plain connections read from
one edge-triggered epoll, handed to their own task for what must be awaited and taken back after,
with nothing received in between forgotten. With the portable backend (each test runs with both)
the same scenarios go through each connection's own task."""

import os
import socket
import struct

import httpx
import pytest
import trio

from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, Frame

from .auth_helpers import EVERYTHING, auth_server  # noqa: F401 (a fixture)
from .helpers import RawClient
from .test_nsqd_robustness import assert_server_healthy, wait_for_no_connections


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def pub(topic: str, body: bytes) -> bytes:
    return f"PUB {topic}\n".encode() + sized(body)


def mpub(topic: str, bodies: list[bytes]) -> bytes:
    return f"MPUB {topic}\n".encode() + sized(struct.pack(">i", len(bodies)) + b"".join(sized(b) for b in bodies))


async def read_frames(client: RawClient, count: int) -> list[Frame]:
    return [await client.read_frame() for _ in range(count)]


async def test_commands_sent_while_the_connection_awaits_are_read_when_the_poller_takes_it_back(
        start_nsqd, auth_server):  # noqa: F811
    auth_server.answers["slow"] = (200, EVERYTHING, 0.5)
    nsqd = await start_nsqd(auth_http_address=[auth_server.address])
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"AUTH\n" + sized(b"slow"))
    with trio.move_on_after(0.2):  # the auth server is still thinking: nothing is answered yet
        await client.read_frame()
        raise AssertionError("answered before the auth server")
    # sent while the connection's task awaits the auth server, then nothing more: only
    # re-adding the socket to the poller's epoll reports these bytes
    await client.send(pub("t", b"during") + b"NOP\n" + pub("t", b"also during"))
    answer = await client.read_response()
    assert answer.startswith(b'{"identity":"alice"')
    assert await client.read_response() == b"OK"  # each PUB asks the auth state, so goes to the task
    assert await client.read_response() == b"OK"
    await client.send(pub("t", b"after"))
    assert await client.read_response() == b"OK"
    assert nsqd.topics["t"].message_count == 3


async def test_a_receive_larger_than_one_read_is_read_to_its_end(nsqd):
    """The edge of the last bytes' arrival comes long before they are read: the poller reads a
    connection whose read filled its buffer again in the next round, without a new edge."""
    client = await RawClient.connect(nsqd.tcp_port)
    bodies = [bytes([n]) * 300_000 for n in range(4)]  # 1.2 MB: one MPUB over many reads
    small = [pub("big", b"%d" % n) for n in range(3000)]
    await client.send(mpub("big", bodies) + b"".join(small))
    assert await read_frames(client, 1 + len(small)) == [Frame(FRAME_TYPE_RESPONSE, b"OK")] * (1 + len(small))
    await client.assert_no_frame(within=0.2)
    assert nsqd.topics["big"].message_count == 4 + len(small)


async def test_a_command_split_over_many_arrivals(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    command = pub("bytes", b"one byte at a time")
    for index in range(len(command)):
        await client.send(command[index:index + 1])
        await trio.sleep(0.002)  # deliberate: each byte a read of its own
    assert await client.read_response() == b"OK"
    await client.send(b"NOP\n" + command)  # several commands in one arrival
    assert await client.read_response() == b"OK"


async def test_held_oks_go_to_the_task_and_keep_command_order(start_nsqd):
    nsqd = await start_nsqd(sync_every=1, mem_queue_size=0)
    client = await RawClient.connect(nsqd.tcp_port)
    await client.sub("synced", "c")
    await client.send(pub("synced", b"1") + pub("synced", b"2") + b"FIN 0123456789abcdef\n" + pub("synced", b"3"))
    assert await read_frames(client, 4) == [
        Frame(FRAME_TYPE_RESPONSE, b"OK"), Frame(FRAME_TYPE_RESPONSE, b"OK"),
        Frame(FRAME_TYPE_ERROR, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"),
        Frame(FRAME_TYPE_RESPONSE, b"OK")]
    await client.send(pub("synced", b"4"))
    assert await client.read_response() == b"OK"


async def test_many_connections_publish_at_once(nsqd):
    async def publisher(index: int) -> None:
        client = await RawClient.connect(nsqd.tcp_port)
        for n in range(10):
            await client.send(pub("many", b"%d-%d" % (index, n)))
            assert await client.read_response() == b"OK"
        await client.close()

    async with trio.open_nursery() as nursery:
        for index in range(300):
            nursery.start_soon(publisher, index)
    assert nsqd.topics["many"].message_count == 3000
    await wait_for_no_connections(nsqd)


async def test_a_connection_closed_while_parked_leaves_nothing_behind(nsqd):
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "gone", rdy=1)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
        assert (await http.post("/channel/delete?topic=t&channel=gone")).status_code == 200
    await consumer.assert_closed()
    await wait_for_no_connections(nsqd)
    # the next connections may reuse its descriptor number
    for _ in range(3):
        client = await RawClient.connect(nsqd.tcp_port)
        await client.send(pub("t", b"x"))
        assert await client.read_response() == b"OK"
        await client.close()
    await assert_server_healthy(nsqd)


@pytest.mark.parametrize("mid_command", [False, True])
async def test_a_reset_connection_ends_alone(nsqd, mid_command):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(pub("t", b"before"))
    assert await client.read_response() == b"OK"
    if mid_command:
        await client.send(b"PUB t\n\x00\x00")
    await trio.sleep(0.05)  # deliberate: the partial command reaches nsqd before the reset
    client.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.stream.socket.close()  # an RST, not a FIN
    await wait_for_no_connections(nsqd)
    await assert_server_healthy(nsqd)


async def test_a_close_that_came_with_the_last_command_ends_the_connection(start_nsqd, auth_server):  # noqa: F811
    """When the poller takes a connection back, its socket may hold a command and the client's
    close, reported as one edge: the read that takes the command leaves the close unread."""
    auth_server.answers["slow"] = (200, EVERYTHING, 0.3)
    nsqd = await start_nsqd(auth_http_address=[auth_server.address])
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"AUTH\n" + sized(b"slow"))
    await trio.sleep(0.1)  # deliberate: the AUTH is out with the auth server (0.3 s) when the rest comes
    await client.send(b"NOP\n")
    client.stream.socket.shutdown(socket.SHUT_WR)
    assert (await client.read_response()).startswith(b'{"identity":"alice"')
    await client.assert_closed()
    await wait_for_no_connections(nsqd)


async def test_an_unexpected_error_in_a_command_ends_that_connection_only(nsqd):
    """As when each connection's task ran its commands: the error is logged and its connection
    closed, while the poller goes on reading the others."""
    other = await RawClient.connect(nsqd.tcp_port)
    await other.send(pub("t", b"before"))
    assert await other.read_response() == b"OK"
    topic = nsqd.topics["t"]

    def broken(*_):
        raise RuntimeError("a defect in a command")

    topic.publish = broken
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(pub("t", b"fails"))
    await client.assert_closed()
    del topic.publish
    await other.send(pub("t", b"after"))
    assert await other.read_response() == b"OK"
    assert topic.message_count == 2
    await other.close()
    await assert_server_healthy(nsqd)


@pytest.mark.io_backends("auto")  # the portable backend reads each connection in its own task
async def test_each_read_of_a_round_is_answered_before_the_next_read_is_executed(nsqd):
    """nsqd answers each connection from its own goroutine: a publisher waiting for its OK has it
    while the poller goes on to the round's other reads, rather than after all of them."""
    clients = [await RawClient.connect(nsqd.tcp_port) for _ in range(3)]
    for client in clients:  # each connection is parked in the poller, the topic made
        await client.send(pub("t", b"first"))
        assert await client.read_response() == b"OK"
    events = []
    publish = nsqd.publish

    def noted_publish(topic, bodies, delay=0.0):
        events.append("publish")
        return publish(topic, bodies, delay)

    nsqd.publish = noted_publish
    for connection in nsqd.connections:
        def noted_send_now(data, send_now=connection.backend.send_now):
            events.append("write")
            return send_now(data)
        connection.backend.send_now = noted_send_now
    for client in clients:  # all three arrive before the poller's next round: no await between them
        os.write(client.stream.socket.fileno(), mpub("t", [b"a", b"b"]))
    for client in clients:
        assert await client.read_response() == b"OK"
    assert events == ["publish", "write"] * 3
    assert nsqd.topics["t"].message_count == 9
