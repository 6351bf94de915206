"""nsqd over real sockets: every fatal protocol error is an error frame, then the connection closes
(NSQ v1.3's nsqd/protocol_v2.go, internal/protocol/names.go). Another client on the same server is
unaffected each time."""

import struct

import pytest

from common.frames import FRAME_TYPE_ERROR, Frame

from .helpers import RawClient

MSG_ID = b"0123456789abcdef"
LONG_NAME = "n" * 65


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def mpub_body(*bodies: bytes, count: int | None = None) -> bytes:
    return struct.pack(">i", len(bodies) if count is None else count) + b"".join(sized(b) for b in bodies)


async def subscribed(client: RawClient) -> None:
    await client.sub("t", "c")


async def closing(client: RawClient) -> None:
    await client.sub("t", "c")
    await client.send(b"CLS\n")
    assert await client.read_response() == b"CLOSE_WAIT"


async def assert_server_healthy(port: int) -> None:
    """A fresh client can still publish, subscribe and get a message."""
    client = await RawClient.connect(port)
    await client.send(b"PUB healthy\n" + sized(b"ping"))
    assert await client.read_response() == b"OK"
    await client.sub("healthy", "check", rdy=1)
    msg = await client.read_message()
    assert msg.body == b"ping"
    await client.send(b"FIN " + msg.id + b"\n")
    await client.close()


CASES = [
    # unknown commands
    (None, b"FOO\n", b"E_INVALID invalid command FOO"),
    (None, b"pub t\n", b"E_INVALID invalid command pub"),
    (None, b"\n", b"E_INVALID invalid command "),
    (None, b"\xff\xfe\n", b"E_INVALID invalid command \xff\xfe"),
    (subscribed, b"PING\n", b"E_INVALID invalid command PING"),
    # SUB
    (None, b"SUB t\n", b"E_INVALID SUB insufficient number of parameters"),
    (None, b"SUB\n", b"E_INVALID SUB insufficient number of parameters"),
    (None, b"SUB bad!topic c\n", b'E_BAD_TOPIC SUB topic name "bad!topic" is not valid'),
    (None, b"SUB  c\n", b'E_BAD_TOPIC SUB topic name "" is not valid'),
    (None, f"SUB {LONG_NAME} c\n".encode(), f'E_BAD_TOPIC SUB topic name "{LONG_NAME}" is not valid'.encode()),
    (None, b"SUB t#ephemeralx c\n", b'E_BAD_TOPIC SUB topic name "t#ephemeralx" is not valid'),
    (None, b"SUB t bad/chan\n", b'E_BAD_CHANNEL SUB channel name "bad/chan" is not valid'),
    (None, b"SUB t \n", b'E_BAD_CHANNEL SUB channel name "" is not valid'),
    (None, f"SUB t {LONG_NAME}\n".encode(), f'E_BAD_CHANNEL SUB channel name "{LONG_NAME}" is not valid'.encode()),
    # PUB
    (None, b"PUB\n", b"E_INVALID PUB insufficient number of parameters"),
    (None, b"PUB a*b\n" + sized(b"x"), b'E_BAD_TOPIC PUB topic name "a*b" is not valid'),
    (None, b"PUB t\n" + struct.pack(">i", 0), b"E_BAD_MESSAGE PUB invalid message body size 0"),
    (None, b"PUB t\n" + struct.pack(">i", -1), b"E_BAD_MESSAGE PUB invalid message body size -1"),
    (None, b"PUB t\n" + struct.pack(">i", 1048577), b"E_BAD_MESSAGE PUB message too big 1048577 > 1048576"),
    # MPUB
    (None, b"MPUB\n", b"E_INVALID MPUB insufficient number of parameters"),
    (None, b"MPUB a*b\n" + sized(mpub_body(b"x")), b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "a*b" is not valid'),
    (None, b"MPUB t\n" + struct.pack(">i", 0), b"E_BAD_BODY MPUB invalid body size 0"),
    (None, b"MPUB t\n" + struct.pack(">i", -5), b"E_BAD_BODY MPUB invalid body size -5"),
    (None, b"MPUB t\n" + struct.pack(">i", 5242881), b"E_BAD_BODY MPUB body too big 5242881 > 5242880"),
    (None, b"MPUB t\n" + sized(mpub_body(count=0)), b"E_BAD_BODY MPUB invalid message count 0"),
    (None, b"MPUB t\n" + sized(mpub_body(count=-1)), b"E_BAD_BODY MPUB invalid message count -1"),
    (None, b"MPUB t\n" + sized(b"\x00\x00"), b"E_BAD_BODY MPUB failed to read message count"),
    (None, b"MPUB t\n" + sized(mpub_body(b"x", count=2)), b"E_BAD_MESSAGE MPUB failed to read message(1) body size"),
    (None, b"MPUB t\n" + sized(struct.pack(">ii", 1, 0)), b"E_BAD_MESSAGE MPUB invalid message(0) body size 0"),
    (None, b"MPUB t\n" + sized(mpub_body(b"x") + struct.pack(">i", -3)),
     b"E_BAD_BODY MPUB body size 13 does not match its 1 messages (9 bytes)"),
    (None, b"MPUB t\n" + sized(struct.pack(">ii", 1, 1048577)), b"E_BAD_MESSAGE MPUB message too big 1048577 > 1048576"),
    (None, b"MPUB t\n" + sized(struct.pack(">ii", 1, 10) + b"short"), b"E_BAD_MESSAGE MPUB failed to read message body"),
    # DPUB
    (None, b"DPUB t\n", b"E_INVALID DPUB insufficient number of parameters"),
    (None, b"DPUB a*b 10\n" + sized(b"x"), b'E_BAD_TOPIC DPUB topic name "a*b" is not valid'),
    (None, b"DPUB t abc\n" + sized(b"x"), b"E_INVALID DPUB could not parse timeout abc"),
    (None, b"DPUB t -5\n" + sized(b"x"), b"E_INVALID DPUB could not parse timeout -5"),
    (None, b"DPUB t 3600001\n" + sized(b"x"), b"E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
    (None, b"DPUB t 10\n" + struct.pack(">i", 0), b"E_BAD_MESSAGE DPUB invalid message body size 0"),
    (None, b"DPUB t 10\n" + struct.pack(">i", 1048577), b"E_BAD_MESSAGE DPUB message too big 1048577 > 1048576"),
    # IDENTIFY and AUTH
    (None, b"IDENTIFY\n" + struct.pack(">i", 0), b"E_BAD_BODY IDENTIFY invalid body size 0"),
    (None, b"IDENTIFY\n" + struct.pack(">i", 5242881), b"E_BAD_BODY IDENTIFY body too big 5242881 > 5242880"),
    (None, b"IDENTIFY\n" + sized(b"{not json"), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (None, b"IDENTIFY\n" + sized(b"[1, 2]"), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (None, b"IDENTIFY\n" + sized(b'{"heartbeat_interval": "1000"}'), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (None, b"IDENTIFY\n" + sized(b'{"feature_negotiation": 1}'), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (None, b"AUTH\n" + sized(b"secret"), b"E_AUTH_DISABLED AUTH disabled"),
    (None, b"AUTH x\n" + sized(b"secret"), b"E_INVALID AUTH invalid number of parameters"),
    (None, b"AUTH\n" + struct.pack(">i", 0), b"E_BAD_BODY AUTH invalid body size 0"),
    # commands in the wrong state
    (None, b"RDY 1\n", b"E_INVALID cannot RDY in current state"),
    (None, b"FIN " + MSG_ID + b"\n", b"E_INVALID cannot FIN in current state"),
    (None, b"REQ " + MSG_ID + b" 0\n", b"E_INVALID cannot REQ in current state"),
    (None, b"TOUCH " + MSG_ID + b"\n", b"E_INVALID cannot TOUCH in current state"),
    (None, b"CLS\n", b"E_INVALID cannot CLS in current state"),
    (subscribed, b"SUB t c\n", b"E_INVALID cannot SUB in current state"),
    (subscribed, b"IDENTIFY\n" + sized(b"{}"), b"E_INVALID cannot IDENTIFY in current state"),
    (subscribed, b"AUTH\n" + sized(b"secret"), b"E_INVALID cannot AUTH in current state"),
    (closing, b"CLS\n", b"E_INVALID cannot CLS in current state"),
    (closing, b"SUB t c\n", b"E_INVALID cannot SUB in current state"),
    # bad parameters once subscribed
    (subscribed, b"RDY abc\n", b"E_INVALID RDY could not parse count abc"),
    (subscribed, b"RDY -1\n", b"E_INVALID RDY could not parse count -1"),
    (subscribed, b"RDY 2501\n", b"E_INVALID RDY count 2501 out of range 0-2500"),
    (subscribed, b"FIN\n", b"E_INVALID FIN insufficient number of params"),
    (subscribed, b"FIN abc\n", b"E_INVALID invalid message ID"),
    (subscribed, b"FIN " + MSG_ID + b"0\n", b"E_INVALID invalid message ID"),
    (subscribed, b"REQ " + MSG_ID + b"\n", b"E_INVALID REQ insufficient number of params"),
    (subscribed, b"REQ abc 0\n", b"E_INVALID invalid message ID"),
    (subscribed, b"REQ " + MSG_ID + b" soon\n", b"E_INVALID REQ could not parse timeout soon"),
    (subscribed, b"REQ " + MSG_ID + b" -1\n", b"E_INVALID REQ could not parse timeout -1"),
    (subscribed, b"TOUCH\n", b"E_INVALID TOUCH insufficient number of params"),
    (subscribed, b"TOUCH abc\n", b"E_INVALID invalid message ID"),
    (closing, b"FIN abc\n", b"E_INVALID invalid message ID"),
]


@pytest.mark.parametrize(("prelude", "command", "expected"), CASES)
async def test_fatal_error_frame_then_close(nsqd, prelude, command, expected):
    client = await RawClient.connect(nsqd.tcp_port)
    if prelude is not None:
        await prelude(client)
    await client.send(command)
    assert await client.read_frame() == Frame(FRAME_TYPE_ERROR, expected)
    await client.assert_closed()
    await assert_server_healthy(nsqd.tcp_port)


async def test_commands_after_a_fatal_error_are_not_executed(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"FOO\nPUB t\n" + sized(b"never"))
    assert await client.read_error() == b"E_INVALID invalid command FOO"
    await client.assert_closed()
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=1)
    await consumer.assert_no_frame(0.3)


async def test_mpub_with_a_bad_message_publishes_none_of_it(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"MPUB t\n" + sized(mpub_body(b"good", b"")))
    assert await client.read_error() == b"E_BAD_MESSAGE MPUB invalid message(1) body size 0"
    await client.assert_closed()
    consumer = await RawClient.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=10)
    await consumer.assert_no_frame(0.3)


async def test_errors_follow_the_daemon_limits(start_nsqd):
    nsqd = await start_nsqd(max_msg_size=100, max_body_size=200, max_req_timeout=1.0, max_rdy_count=3)
    cases = [
        (b"PUB t\n" + struct.pack(">i", 101), b"E_BAD_MESSAGE PUB message too big 101 > 100"),
        (b"DPUB t 1001\n" + sized(b"x"), b"E_INVALID DPUB timeout 1001 out of range 0-1000"),
        (b"MPUB t\n" + struct.pack(">i", 201), b"E_BAD_BODY MPUB body too big 201 > 200"),
        (b"MPUB t\n" + sized(struct.pack(">ii", 1, 101) + b"m" * 101), b"E_BAD_MESSAGE MPUB message too big 101 > 100"),
        (b"MPUB t\n" + sized(mpub_body(count=40)), b"E_BAD_BODY MPUB invalid message count 40"),
        (b"IDENTIFY\n" + struct.pack(">i", 201), b"E_BAD_BODY IDENTIFY body too big 201 > 200"),
    ]
    for command, expected in cases:
        client = await RawClient.connect(nsqd.tcp_port)
        await client.send(command)
        assert await client.read_error() == expected
        await client.assert_closed()
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(b"PUB t\n" + sized(b"m" * 100) + b"DPUB t 1000\n" + sized(b"x"))
    assert await client.read_response() == b"OK"
    assert await client.read_response() == b"OK"
