"""nsqd over real sockets: the magic, IDENTIFY and heartbeats (NSQ v1.3's nsqd/protocol_v2.go, nsqd/client_v2.go)."""

import json
import struct

import pytest
import trio

from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, Frame

from .helpers import RawClient

DEFAULT_ANSWER = {
    "max_rdy_count": 2500,
    "version": "1.3.0",
    "max_msg_timeout": 900000,
    "msg_timeout": 60000,
    "tls_v1": False,
    "deflate": False,
    "deflate_level": 6,
    "max_deflate_level": 6,
    "snappy": False,
    "sample_rate": 0,
    "auth_required": False,
    "output_buffer_size": 16384,
    "output_buffer_timeout": 250,
}


def identify_command(body: bytes) -> bytes:
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


async def publish(port: int, topic: str, body: bytes) -> None:
    """PUB from a connection of its own (a consumer could see its message before its OK)."""
    client = await RawClient.connect(port)
    await client.send(f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body)
    assert await client.read_response() == b"OK"
    await client.close()


async def assert_pub_works(port: int) -> None:
    await publish(port, "still-alive", b"ok")


@pytest.mark.parametrize("magic", [b"  V1", b"V2  ", b"GET / HTTP/1.1\r\n\r\n", b"\x00\x00\x00\x00"])
async def test_wrong_magic_gets_e_bad_protocol_and_close(nsqd, magic):
    client = await RawClient.connect(nsqd.tcp_port, magic=False)
    await client.send(magic)
    assert await client.read_error() == b"E_BAD_PROTOCOL"
    await client.assert_closed()
    await assert_pub_works(nsqd.tcp_port)


async def test_magic_split_across_writes_is_accepted(nsqd):
    client = await RawClient.connect(nsqd.tcp_port, magic=False)
    for byte in b"  V2":
        await client.send(bytes([byte]))
        await trio.sleep(0.01)
    await client.send(b"PUB t\n\x00\x00\x00\x01x")
    assert await client.read_response() == b"OK"


async def test_identify_without_feature_negotiation_answers_ok(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    assert await client.identify(client_id="c1", hostname="h", user_agent="raw/1.0") == b"OK"
    await client.send(b"PUB t\n\x00\x00\x00\x01x")
    assert await client.read_response() == b"OK"


async def test_identify_with_feature_negotiation_answers_nsq_json(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(identify_command(b'{"feature_negotiation": true}'))
    raw = await client.read_response()
    answer = json.loads(raw)
    assert list(answer) == list(DEFAULT_ANSWER)
    assert answer == DEFAULT_ANSWER
    # Go's json.Marshal: no spaces
    assert raw.startswith(b'{"max_rdy_count":2500,"version":"1.3.0",')


async def test_identify_answer_honours_client_settings(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    answer = await client.identify(
        feature_negotiation=True, heartbeat_interval=1000, msg_timeout=1000,
        output_buffer_size=4096, output_buffer_timeout=1000, sample_rate=42)
    assert list(answer) == list(DEFAULT_ANSWER)
    assert answer == DEFAULT_ANSWER | {
        "msg_timeout": 1000, "output_buffer_size": 4096, "output_buffer_timeout": 1000, "sample_rate": 42}


async def test_identify_answer_reflects_daemon_options(start_nsqd):
    nsqd = await start_nsqd(max_rdy_count=7, max_msg_timeout=120.0, msg_timeout=2.5, output_buffer_timeout=0.1)
    client = await RawClient.connect(nsqd.tcp_port)
    answer = await client.identify(feature_negotiation=True)
    assert answer == DEFAULT_ANSWER | {
        "max_rdy_count": 7, "max_msg_timeout": 120000, "msg_timeout": 2500, "output_buffer_timeout": 100}


async def test_identify_deflate_level_is_six_unless_deflate_is_negotiated(nsqd):
    # nsqd only honours deflate_level for a client that gets deflate
    client = await RawClient.connect(nsqd.tcp_port)
    answer = await client.identify(feature_negotiation=True, deflate_level=3)
    assert (answer["deflate"], answer["deflate_level"]) == (False, 6)


async def test_identify_unbuffered_output(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    answer = await client.identify(feature_negotiation=True, output_buffer_size=-1)
    assert (answer["output_buffer_size"], answer["output_buffer_timeout"]) == (1, 0)


async def test_identify_unbuffered_output_wins_over_a_buffer_timeout(nsqd):
    # SetOutputBuffer applies the timeout first, then size -1 forces it to 0
    client = await RawClient.connect(nsqd.tcp_port)
    answer = await client.identify(feature_negotiation=True, output_buffer_size=-1, output_buffer_timeout=500)
    assert (answer["output_buffer_size"], answer["output_buffer_timeout"]) == (1, 0)


async def test_identify_output_buffer_timeout_disabled(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    answer = await client.identify(feature_negotiation=True, output_buffer_timeout=-1)
    assert (answer["output_buffer_size"], answer["output_buffer_timeout"]) == (16384, 0)


async def test_identify_ignores_unknown_fields_and_nulls(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    answer = await client.identify(feature_negotiation=True, long_id="x", unknown=[1, 2], msg_timeout=None)
    assert answer == DEFAULT_ANSWER


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("heartbeat_interval", 999, "heartbeat interval (999) is invalid"),
    ("heartbeat_interval", -2, "heartbeat interval (-2) is invalid"),
    ("heartbeat_interval", 60001, "heartbeat interval (60001) is invalid"),
    ("output_buffer_size", 63, "output buffer size (63) is invalid"),
    ("output_buffer_size", 65537, "output buffer size (65537) is invalid"),
    ("output_buffer_size", -2, "output buffer size (-2) is invalid"),
    ("output_buffer_timeout", 24, "output buffer timeout (24) is invalid"),
    ("output_buffer_timeout", 30001, "output buffer timeout (30001) is invalid"),
    ("output_buffer_timeout", -2, "output buffer timeout (-2) is invalid"),
    ("sample_rate", -1, "sample rate (-1) is invalid"),
    ("sample_rate", 100, "sample rate (100) is invalid"),
    ("msg_timeout", 999, "msg timeout (999) is invalid"),
    ("msg_timeout", 900001, "msg timeout (900001) is invalid"),
    ("msg_timeout", -1, "msg timeout (-1) is invalid"),
])
async def test_identify_invalid_value_is_fatal_e_bad_body(nsqd, field, value, reason):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(identify_command(json.dumps({field: value}).encode()))
    assert await client.read_error() == f"E_BAD_BODY IDENTIFY {reason}".encode()
    await client.assert_closed()
    await assert_pub_works(nsqd.tcp_port)


async def test_identify_checks_output_buffer_timeout_before_size(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(identify_command(b'{"output_buffer_size":1,"output_buffer_timeout":1}'))
    assert await client.read_error() == b"E_BAD_BODY IDENTIFY output buffer timeout (1) is invalid"
    await client.assert_closed()


async def test_identify_limits_follow_daemon_options(start_nsqd):
    nsqd = await start_nsqd(max_heartbeat_interval=5.0, max_output_buffer_size=1000, max_msg_timeout=2.0,
                              msg_timeout=1.0)
    for field, value, reason in [("heartbeat_interval", 5001, "heartbeat interval (5001) is invalid"),
                                 ("output_buffer_size", 1001, "output buffer size (1001) is invalid"),
                                 ("msg_timeout", 2001, "msg timeout (2001) is invalid")]:
        client = await RawClient.connect(nsqd.tcp_port)
        await client.send(identify_command(json.dumps({field: value}).encode()))
        assert await client.read_error() == f"E_BAD_BODY IDENTIFY {reason}".encode()
        await client.assert_closed()
    client = await RawClient.connect(nsqd.tcp_port)
    answer = await client.identify(feature_negotiation=True, heartbeat_interval=5000, output_buffer_size=1000,
                                   msg_timeout=2000)
    assert (answer["output_buffer_size"], answer["msg_timeout"]) == (1000, 2000)


async def test_heartbeats_keep_coming_while_subscribed(nsqd):
    """Over a real socket; their times are checked in tests/test_nsqd_timing_mockclock.py."""
    client = await RawClient.connect(nsqd.tcp_port)
    assert await client.identify(heartbeat_interval=1000) == b"OK"
    await client.sub("t", "c", rdy=1)
    for _ in range(2):
        assert await client.read_any_frame(10) == Frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")
        await client.send(b"NOP\n")


async def test_a_heartbeat_goes_after_the_buffered_output_it_finds(nsqd):
    """A message waiting for the output buffer's timeout goes first, flushed with the heartbeat
    (an idle connection's heartbeat is written straight to its socket: nsqd/connection.py)."""
    client = await RawClient.connect(nsqd.tcp_port)
    assert await client.identify(heartbeat_interval=1000, output_buffer_timeout=20000) == b"OK"
    await client.sub("t", "c", rdy=2)  # one message leaves room for more: it waits in the buffer
    await publish(nsqd.tcp_port, "t", b"buffered")
    with trio.fail_after(10):  # long before the buffer's timeout
        first = await client.read_any_frame(10)
        assert first.frame_type == FRAME_TYPE_MESSAGE and first.data.endswith(b"buffered")
        assert await client.read_any_frame(10) == Frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")


async def test_disabled_heartbeats_refuse_sub(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    answer = await client.identify(feature_negotiation=True, heartbeat_interval=-1)
    assert answer == DEFAULT_ANSWER
    await client.send(b"SUB t c\n")
    frame = await client.read_frame()
    assert frame == Frame(FRAME_TYPE_ERROR, b"E_INVALID cannot SUB with heartbeats disabled")
    await client.assert_closed()
    await assert_pub_works(nsqd.tcp_port)


async def test_disabled_heartbeats_still_allow_publishing(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    assert await client.identify(heartbeat_interval=-1) == b"OK"
    await client.send(b"PUB t\n\x00\x00\x00\x01x")
    assert await client.read_response() == b"OK"


async def test_identify_may_be_sent_twice_before_sub(nsqd):
    client = await RawClient.connect(nsqd.tcp_port)
    assert await client.identify(client_id="a") == b"OK"
    answer = await client.identify(feature_negotiation=True, msg_timeout=1000)
    assert answer["msg_timeout"] == 1000
    await client.sub("t", "c")