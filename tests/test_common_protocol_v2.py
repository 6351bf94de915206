"""common/protocol_v2.py and common/commands.py: the V2 command stream, byte for byte
(NSQ v1.3's nsqd/protocol_v2.go)."""

import json
import random
import struct

import pytest

from common.commands import (
    MAGIC_V2, Auth, Cls, Dpub, Fin, Identify, Mpub, Nop, Pub, Rdy, Req, Sub, Touch,
)
from common.errors import ClientError
from common.frames import encode_error
from common.identify import FIELDS
from common import protocol_v2
from common.protocol_v2 import (
    MAX_LINE_LENGTH, NEED_DATA, CommandParser, FinRun, Limits, MpubTopic, State, mpub_bodies, parse_mpub_body,
)

MSG_ID = b"0a1b2c3d4e5f6071"
INIT, SUBSCRIBED, CLOSING = State.INIT, State.SUBSCRIBED, State.CLOSING


def size(n: int) -> bytes:
    return struct.pack(">i", n)


IDENTIFY_BODY = b'{"client_id":"c1","heartbeat_interval":1000,"feature_negotiation":true}'
IDENTIFY_DATA = {name: zero for name, (_, zero) in FIELDS.items()} | {
    "client_id": "c1", "heartbeat_interval": 1000, "feature_negotiation": True,
}
MPUB_BODY = size(2) + size(3) + b"one" + size(3) + b"two"

# (wire bytes, event, a state the command is allowed in)
VECTORS = {
    "IDENTIFY": (b"IDENTIFY\n" + size(len(IDENTIFY_BODY)) + IDENTIFY_BODY, Identify(IDENTIFY_DATA), INIT),
    "AUTH": (b"AUTH\n\x00\x00\x00\x06secret", Auth(b"secret"), INIT),
    "SUB": (b"SUB test ch\n", Sub("test", "ch"), INIT),
    "PUB": (b"PUB test\n\x00\x00\x00\x05hello", Pub("test", b"hello"), INIT),
    "MPUB": (b"MPUB test\n\x00\x00\x00\x12" + MPUB_BODY, Mpub("test", [b"one", b"two"]), INIT),
    "DPUB": (b"DPUB test 1500\n\x00\x00\x00\x02hi", Dpub("test", 1500, b"hi"), INIT),
    "RDY": (b"RDY 100\n", Rdy(100), SUBSCRIBED),
    "FIN": (b"FIN 0a1b2c3d4e5f6071\n", Fin(MSG_ID), SUBSCRIBED),
    "REQ": (b"REQ 0a1b2c3d4e5f6071 5000\n", Req(MSG_ID, 5000), SUBSCRIBED),
    "TOUCH": (b"TOUCH 0a1b2c3d4e5f6071\n", Touch(MSG_ID), SUBSCRIBED),
    "CLS": (b"CLS\n", Cls(), SUBSCRIBED),
    "NOP": (b"NOP\n", Nop(), INIT),
}

# NSQ's state table: where each command may be sent.
ALLOWED_STATES = {
    "IDENTIFY": {INIT}, "AUTH": {INIT}, "SUB": {INIT},
    "RDY": {SUBSCRIBED},
    "FIN": {SUBSCRIBED, CLOSING}, "REQ": {SUBSCRIBED, CLOSING}, "TOUCH": {SUBSCRIBED, CLOSING},
    "CLS": {SUBSCRIBED},
    "NOP": {INIT, SUBSCRIBED, CLOSING}, "PUB": {INIT, SUBSCRIBED, CLOSING},
    "MPUB": {INIT, SUBSCRIBED, CLOSING}, "DPUB": {INIT, SUBSCRIBED, CLOSING},
}


def new_parser(state: State = INIT, limits: Limits = Limits(), magic: bool = True) -> CommandParser:
    parser = CommandParser(limits)
    parser.state = state
    if magic:
        parser.receive_data(MAGIC_V2)
    return parser


def drain(parser: CommandParser) -> list:
    events = []
    while (event := parser.next_event()) is not NEED_DATA:
        events.append(event)
    return events


def parse(data: bytes, state: State = INIT, limits: Limits = Limits()) -> list:
    parser = new_parser(state, limits)
    parser.receive_data(data)
    events = drain(parser)
    assert parser.buffered == 0
    return events


def parse_error(data: bytes, state: State = INIT, limits: Limits = Limits()) -> ClientError:
    parser = new_parser(state, limits)
    parser.receive_data(data)
    with pytest.raises(ClientError) as info:
        drain(parser)
    assert info.value.fatal
    return info.value


def feed_in_pieces(parser: CommandParser, data: bytes, cuts: list[int]) -> list:
    """Feed ``data`` cut at ``cuts``; events must only appear once their last byte is in."""
    events = []
    bounds = [0, *cuts, len(data)]
    for start, end in zip(bounds, bounds[1:]):
        parser.receive_data(data[start:end])
        events += drain(parser)
    return events


# -- every command from exact bytes ------------------------------------------------------


@pytest.mark.parametrize("name", VECTORS)
def test_command_from_exact_bytes(name):
    wire, event, state = VECTORS[name]
    assert parse(wire, state) == [event]


@pytest.mark.parametrize("name", VECTORS)
def test_command_fed_one_byte_at_a_time(name):
    wire, event, state = VECTORS[name]
    parser = new_parser(state)
    for index in range(len(wire)):
        parser.receive_data(wire[index:index + 1])
        got = drain(parser)
        assert got == ([event] if index == len(wire) - 1 else [])
        assert parser.buffered == (0 if got else index + 1)


@pytest.mark.parametrize("name", VECTORS)
def test_command_with_crlf_line_ending(name):
    wire, event, state = VECTORS[name]
    line_end = wire.index(b"\n")
    assert parse(wire[:line_end] + b"\r" + wire[line_end:], state) == [event]


def test_magic_fed_byte_by_byte_then_command():
    parser = CommandParser()
    for byte in b"  V2":
        assert parser.next_event() is NEED_DATA
        parser.receive_data(bytes([byte]))
    assert parser.buffered == 4
    assert parser.next_event() is NEED_DATA
    assert parser.buffered == 0
    parser.receive_data(b"NOP\n")
    assert drain(parser) == [Nop()]


def test_parser_without_magic_reads_commands_at_once():
    parser = CommandParser(expect_magic=False)
    parser.receive_data(b"NOP\n")
    assert drain(parser) == [Nop()]


@pytest.mark.parametrize("magic", [b"  V1", b"GET ", b"V2  ", b"\x00\x00\x00\x00"])
def test_wrong_magic_is_e_bad_protocol(magic):
    parser = CommandParser()
    parser.receive_data(magic + b"NOP\n")
    with pytest.raises(ClientError) as info:
        parser.next_event()
    assert info.value.to_bytes() == b"E_BAD_PROTOCOL"
    assert info.value.fatal


def test_wrong_magic_is_only_judged_on_four_bytes():
    parser = CommandParser()
    parser.receive_data(b"  V")
    assert parser.next_event() is NEED_DATA
    parser.receive_data(b"1")
    with pytest.raises(ClientError, match="E_BAD_PROTOCOL"):
        parser.next_event()


def test_worked_client_bytes_from_the_reference():
    wire = (b"  V2" + b"PUB test\n" + bytes.fromhex("00000005") + b"hello")
    parser = CommandParser()
    parser.receive_data(wire)
    assert drain(parser) == [Pub("test", b"hello")]
    parser.state = SUBSCRIBED
    parser.receive_data(b"FIN 0a1b2c3d4e5f6071\nRDY 100\nREQ 0a1b2c3d4e5f6071 5000\nNOP\n")
    assert drain(parser) == [Fin(MSG_ID), Rdy(100), Req(MSG_ID, 5000), Nop()]


# -- incremental parsing -----------------------------------------------------------------

SUBSCRIBED_STREAM = [VECTORS[name] for name in
                     ("NOP", "PUB", "RDY", "MPUB", "FIN", "DPUB", "REQ", "TOUCH", "NOP", "CLS")]


def test_several_commands_in_one_buffer():
    wire = b"".join(vector[0] for vector in SUBSCRIBED_STREAM)
    assert parse(wire, SUBSCRIBED) == [vector[1] for vector in SUBSCRIBED_STREAM]


@pytest.mark.parametrize("seed", range(25))
def test_several_commands_in_random_splits(seed):
    rng = random.Random(seed)
    wire = b"".join(vector[0] for vector in SUBSCRIBED_STREAM)
    cuts = sorted(rng.sample(range(1, len(wire)), rng.randint(1, 30)))
    events = feed_in_pieces(new_parser(SUBSCRIBED), wire, cuts)
    assert events == [vector[1] for vector in SUBSCRIBED_STREAM]


def test_several_commands_one_byte_at_a_time():
    wire = b"".join(vector[0] for vector in SUBSCRIBED_STREAM)
    parser = new_parser(SUBSCRIBED)
    events = feed_in_pieces(parser, wire, list(range(1, len(wire))))
    assert events == [vector[1] for vector in SUBSCRIBED_STREAM]
    assert parser.buffered == 0


def test_a_whole_session_as_the_server_moves_the_state():
    wire = (MAGIC_V2 + VECTORS["IDENTIFY"][0] + b"SUB t c\nRDY 2\nFIN 0a1b2c3d4e5f6071\n"
            b"CLS\nRDY 5\nFIN 0a1b2c3d4e5f6071\n")
    parser = CommandParser()
    parser.receive_data(wire)
    events = []
    while (event := parser.next_event()) is not NEED_DATA:
        events.append(event)
        if isinstance(event, Sub):
            parser.state = SUBSCRIBED
        elif isinstance(event, Cls):
            parser.state = CLOSING
    assert events == [VECTORS["IDENTIFY"][1], Sub("t", "c"), Rdy(2), Fin(MSG_ID), Cls(), Fin(MSG_ID)]


def test_body_in_many_chunks_is_assembled_and_buffered_is_counted():
    body = bytes(range(256)) * 400  # 102400 bytes, every byte value, newlines included
    head = b"PUB big\n" + size(len(body))
    parser = new_parser()
    parser.receive_data(head)
    assert parser.next_event() is NEED_DATA
    assert parser.buffered == len(head)
    fed = len(head)
    for start in range(0, len(body) - 1000, 1000):
        parser.receive_data(body[start:start + 1000])
        fed += 1000
        assert parser.next_event() is NEED_DATA
        assert parser.buffered == fed
    parser.receive_data(body[start + 1000:] + b"NOP\nPU")
    assert parser.next_event() == Pub("big", body)
    assert parser.buffered == len(b"NOP\nPU")
    assert parser.next_event() == Nop()
    assert parser.next_event() is NEED_DATA
    assert parser.buffered == 2


def test_buffered_counts_a_partial_line_and_a_partial_size():
    parser = new_parser()
    parser.receive_data(b"PUB t")
    assert parser.next_event() is NEED_DATA
    assert parser.buffered == 5
    parser.receive_data(b"\n\x00\x00")
    assert parser.next_event() is NEED_DATA
    assert parser.buffered == 8
    parser.receive_data(b"\x00\x01x")
    assert parser.next_event() == Pub("t", b"x")
    assert parser.buffered == 0


def test_mpub_body_fed_in_chunks():
    bodies = [bytes([n]) * (n * 37 + 1) for n in range(50)]
    wire = Mpub("t", bodies).to_bytes()
    parser = new_parser()
    events = feed_in_pieces(parser, wire, list(range(7, len(wire), 101)))
    assert events == [Mpub("t", bodies)]


def test_body_may_hold_newlines_spaces_and_crlf():
    body = b"a\nb c\r\n\n"
    assert parse(b"PUB t\n" + size(len(body)) + body) == [Pub("t", body)]


# -- line syntax --------------------------------------------------------------------------


def test_only_one_carriage_return_is_stripped():
    assert str(parse_error(b"NOP\r\r\n")) == "E_INVALID invalid command NOP\r"


def test_params_split_on_single_spaces():
    assert parse(b"NOP extra params\n") == [Nop()]
    assert parse(b"RDY 5 \n", SUBSCRIBED) == [Rdy(5)]
    assert parse(b"RDY  5\n", SUBSCRIBED) == [Rdy(0)]  # params are RDY, "", 5: NSQ reads "" as 0
    assert str(parse_error(b"SUB  t c\n")) == 'E_BAD_TOPIC SUB topic name "" is not valid'


def test_line_of_16_kib_with_its_newline_is_accepted():
    line = b"NOP " + b"a" * (MAX_LINE_LENGTH - 5) + b"\n"
    assert len(line) == MAX_LINE_LENGTH
    assert parse(line) == [Nop()]


def test_line_one_byte_longer_than_16_kib_is_refused():
    line = b"NOP " + b"a" * (MAX_LINE_LENGTH - 4) + b"\n"
    error = parse_error(line)
    assert str(error) == f"E_INVALID command line longer than {MAX_LINE_LENGTH} bytes"


def test_long_line_is_refused_before_its_newline_arrives():
    parser = new_parser()
    parser.receive_data(b"a" * (MAX_LINE_LENGTH - 1))
    assert parser.next_event() is NEED_DATA
    parser.receive_data(b"a")
    with pytest.raises(ClientError, match="command line longer than"):
        parser.next_event()


# -- errors, with NSQ's codes and texts ---------------------------------------------------


@pytest.mark.parametrize("line, text", [
    (b"FOO\n", "E_INVALID invalid command FOO"),
    (b"nop\n", "E_INVALID invalid command nop"),
    (b"\n", "E_INVALID invalid command "),
    (b" NOP\n", "E_INVALID invalid command "),
    (b"PUBLISH t\n", "E_INVALID invalid command PUBLISH"),
])
def test_unknown_command(line, text):
    assert str(parse_error(line)) == text


def test_unknown_command_error_frame_matches_the_reference_bytes():
    frame = encode_error(parse_error(b"FOO\n").to_bytes())
    assert frame == bytes.fromhex("00000021 00000001") + b"E_INVALID invalid command FOO"


def test_unknown_command_with_invalid_utf8_is_echoed_raw():
    assert parse_error(b"F\xffO\n").to_bytes() == b"E_INVALID invalid command F\xffO"


def test_errors_come_after_the_good_commands_before_them():
    parser = new_parser()
    parser.receive_data(b"NOP\nNOP\nBAD\nNOP\n")
    assert parser.next_event() == Nop()
    assert parser.next_event() == Nop()
    with pytest.raises(ClientError, match="invalid command BAD"):
        parser.next_event()


STATE_CASES = [(name, state) for name in VECTORS for state in (INIT, SUBSCRIBED, CLOSING)]


@pytest.mark.parametrize("name, state", STATE_CASES)
def test_state_table(name, state):
    wire, event, _ = VECTORS[name]
    if state in ALLOWED_STATES[name]:
        assert parse(wire, state) == [event]
    elif name == "RDY" and state == CLOSING:
        assert parse(wire + b"NOP\n", state) == [Nop()]  # RDY after CLS is silently ignored
    else:
        assert str(parse_error(wire, state)) == f"E_INVALID cannot {name} in current state"


@pytest.mark.parametrize("line", [b"RDY abc\n", b"RDY 99999\n", b"RDY\n"])
def test_rdy_in_closing_is_ignored_whatever_its_params(line):
    assert parse(line + b"NOP\n", CLOSING) == [Nop()]


@pytest.mark.parametrize("line, state", [
    (b"FIN\n", INIT), (b"REQ\n", INIT), (b"TOUCH\n", INIT), (b"RDY abc\n", INIT),
    (b"AUTH extra\n", SUBSCRIBED), (b"SUB\n", SUBSCRIBED), (b"CLS\n", INIT),
])
def test_state_is_checked_before_params(line, state):
    name = line.split()[0].decode()
    assert str(parse_error(line, state)) == f"E_INVALID cannot {name} in current state"


@pytest.mark.parametrize("line, state, text", [
    (b"AUTH x\n", INIT, "E_INVALID AUTH invalid number of parameters"),
    (b"SUB\n", INIT, "E_INVALID SUB insufficient number of parameters"),
    (b"SUB t\n", INIT, "E_INVALID SUB insufficient number of parameters"),
    (b"RDY abc\n", SUBSCRIBED, "E_INVALID RDY could not parse count abc"),
    (b"RDY -1\n", SUBSCRIBED, "E_INVALID RDY could not parse count -1"),
    (b"RDY +5\n", SUBSCRIBED, "E_INVALID RDY could not parse count +5"),
    (b"RDY 2501\n", SUBSCRIBED, "E_INVALID RDY count 2501 out of range 0-2500"),
    (b"FIN\n", SUBSCRIBED, "E_INVALID FIN insufficient number of params"),
    (b"FIN 0a1b2c3d4e5f607\n", SUBSCRIBED, "E_INVALID invalid message ID"),
    (b"FIN 0a1b2c3d4e5f60712\n", CLOSING, "E_INVALID invalid message ID"),
    (b"TOUCH\n", SUBSCRIBED, "E_INVALID TOUCH insufficient number of params"),
    (b"TOUCH abc\n", CLOSING, "E_INVALID invalid message ID"),
    (b"REQ\n", SUBSCRIBED, "E_INVALID REQ insufficient number of params"),
    (b"REQ 0a1b2c3d4e5f6071\n", SUBSCRIBED, "E_INVALID REQ insufficient number of params"),
    (b"REQ abc 10\n", SUBSCRIBED, "E_INVALID invalid message ID"),
    (b"REQ 0a1b2c3d4e5f6071 x\n", SUBSCRIBED, "E_INVALID REQ could not parse timeout x"),
    (b"REQ 0a1b2c3d4e5f6071 -5\n", CLOSING, "E_INVALID REQ could not parse timeout -5"),
    (b"PUB\n", INIT, "E_INVALID PUB insufficient number of parameters"),
    (b"MPUB\n", INIT, "E_INVALID MPUB insufficient number of parameters"),
    (b"DPUB t\n", INIT, "E_INVALID DPUB insufficient number of parameters"),
    (b"DPUB t x\n", INIT, "E_INVALID DPUB could not parse timeout x"),
    (b"DPUB t -1\n", INIT, "E_INVALID DPUB could not parse timeout -1"),
    (b"DPUB t 3600001\n", INIT, "E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
])
def test_bad_params(line, state, text):
    assert str(parse_error(line, state)) == text


def test_rdy_bounds():
    assert parse(b"RDY\n", SUBSCRIBED) == [Rdy(1)]
    assert parse(b"RDY 0\n", SUBSCRIBED) == [Rdy(0)]
    assert parse(b"RDY 2500\n", SUBSCRIBED) == [Rdy(2500)]
    limits = Limits(max_rdy_count=10)
    assert parse(b"RDY 10\n", SUBSCRIBED, limits) == [Rdy(10)]
    assert str(parse_error(b"RDY 11\n", SUBSCRIBED, limits)) == "E_INVALID RDY count 11 out of range 0-10"


def test_req_timeout_is_clamped_not_refused():
    assert parse(b"REQ 0a1b2c3d4e5f6071 0\n", SUBSCRIBED) == [Req(MSG_ID, 0)]
    assert parse(b"REQ 0a1b2c3d4e5f6071 99999999\n", SUBSCRIBED) == [Req(MSG_ID, 3_600_000)]
    assert parse(b"REQ 0a1b2c3d4e5f6071 7\n", CLOSING, Limits(max_req_timeout_ms=5)) == [Req(MSG_ID, 5)]


@pytest.mark.parametrize("count, text", [
    (b"18446744073709551615", "E_INVALID RDY count -1 out of range 0-2500"),  # Go's uint64 as int64
    (b"9223372036854775808", "E_INVALID RDY count -9223372036854775808 out of range 0-2500"),
    (b"99999999999999999999", "E_INVALID RDY count 7766279631452241919 out of range 0-2500"),  # wrapped
])
def test_rdy_counts_wrap_as_go_integers(count, text):
    assert str(parse_error(b"RDY " + count + b"\n", SUBSCRIBED)) == text
    assert parse(b"RDY 18446744073709551716\n", SUBSCRIBED) == [Rdy(100)]


def test_req_timeouts_wrap_as_go_durations():
    """ms as a uint64, then time.Duration(ms) * time.Millisecond in int64 nanoseconds: what
    wraps negative is clamped to 0."""
    for timeout in (b"18446744073709551615", b"9223372036855"):
        assert parse(b"REQ 0a1b2c3d4e5f6071 " + timeout + b"\n", SUBSCRIBED) == [Req(MSG_ID, 0)]
    assert parse(b"REQ 0a1b2c3d4e5f6071 9223372036854\n", SUBSCRIBED) == [Req(MSG_ID, 3_600_000)]


def test_dpub_timeouts_wrap_as_go_durations():
    assert parse(b"DPUB t 18446744073709551617\n\x00\x00\x00\x01x") == [Dpub("t", 1, b"x")]
    assert str(parse_error(b"DPUB t 18446744073709551615\n")) == \
        "E_INVALID DPUB timeout 18446744073709551615 out of range 0-3600000"


def test_message_ids_are_any_16_bytes():
    assert parse(b"FIN ZZZZZZZZZZZZZZZZ\n", SUBSCRIBED) == [Fin(b"Z" * 16)]


def test_dpub_timeout_bounds():
    assert parse(b"DPUB t 0\n\x00\x00\x00\x01x") == [Dpub("t", 0, b"x")]
    assert parse(b"DPUB t 3600000\n\x00\x00\x00\x01x") == [Dpub("t", 3_600_000, b"x")]


@pytest.mark.parametrize("line, text", [
    (b"SUB bad!topic ch\n", 'E_BAD_TOPIC SUB topic name "bad!topic" is not valid'),
    (b"SUB " + b"t" * 65 + b" ch\n", 'E_BAD_TOPIC SUB topic name "' + "t" * 65 + '" is not valid'),
    (b'SUB t"x ch\n', 'E_BAD_TOPIC SUB topic name "t\\"x" is not valid'),
    (b"SUB t\t ch\n", 'E_BAD_TOPIC SUB topic name "t\\t" is not valid'),
    (b"SUB t ch!\n", 'E_BAD_CHANNEL SUB channel name "ch!" is not valid'),
    (b"SUB t \n", 'E_BAD_CHANNEL SUB channel name "" is not valid'),
    (b"SUB t c#ephemeralx\n", 'E_BAD_CHANNEL SUB channel name "c#ephemeralx" is not valid'),
    (b"PUB bad*topic\n", 'E_BAD_TOPIC PUB topic name "bad*topic" is not valid'),
    (b"PUB \n", 'E_BAD_TOPIC PUB topic name "" is not valid'),
    (b"DPUB b@d 10\n", 'E_BAD_TOPIC DPUB topic name "b@d" is not valid'),
    (b"MPUB x!\n", 'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "x!" is not valid'),
])
def test_bad_names_before_any_body(line, text):
    assert str(parse_error(line)) == text


def test_bad_topic_with_invalid_utf8_is_quoted_like_go():
    error = parse_error(b"SUB t\xff\xe2\x82 ch\n")
    assert error.to_bytes() == b'E_BAD_TOPIC SUB topic name "t\\xff\\xe2\\x82" is not valid'


def test_topic_and_channel_at_the_length_limit():
    topic, channel = "t" * 64, "c" * 54 + "#ephemeral"
    assert parse(f"SUB {topic} {channel}\n".encode()) == [Sub(topic, channel)]


@pytest.mark.parametrize("head, size_value, text", [
    (b"PUB t\n", 0, "E_BAD_MESSAGE PUB invalid message body size 0"),
    (b"PUB t\n", -1, "E_BAD_MESSAGE PUB invalid message body size -1"),
    (b"PUB t\n", 1048577, "E_BAD_MESSAGE PUB message too big 1048577 > 1048576"),
    (b"PUB t\n", 0x7FFFFFFF, "E_BAD_MESSAGE PUB message too big 2147483647 > 1048576"),
    (b"DPUB t 5\n", 0, "E_BAD_MESSAGE DPUB invalid message body size 0"),
    (b"DPUB t 5\n", -2, "E_BAD_MESSAGE DPUB invalid message body size -2"),
    (b"DPUB t 5\n", 1048577, "E_BAD_MESSAGE DPUB message too big 1048577 > 1048576"),
    (b"IDENTIFY\n", 0, "E_BAD_BODY IDENTIFY invalid body size 0"),
    (b"IDENTIFY\n", -1, "E_BAD_BODY IDENTIFY invalid body size -1"),
    (b"IDENTIFY\n", 5242881, "E_BAD_BODY IDENTIFY body too big 5242881 > 5242880"),
    (b"AUTH\n", 0, "E_BAD_BODY AUTH invalid body size 0"),
    (b"AUTH\n", -3, "E_BAD_BODY AUTH invalid body size -3"),
    (b"AUTH\n", 5242881, "E_BAD_BODY AUTH body too big 5242881 > 5242880"),
    (b"MPUB t\n", 0, "E_BAD_BODY MPUB invalid body size 0"),
    (b"MPUB t\n", -1, "E_BAD_BODY MPUB invalid body size -1"),
    (b"MPUB t\n", 5242881, "E_BAD_BODY MPUB body too big 5242881 > 5242880"),
])
def test_bad_size_prefix_is_refused_before_the_body_arrives(head, size_value, text):
    """Only the 4-byte size is fed: no body byte is waited for."""
    assert str(parse_error(head + size(size_value))) == text


def test_size_limits_follow_the_configured_limits():
    limits = Limits(max_body_size=100, max_msg_size=10)
    assert parse(b"PUB t\n" + size(10) + b"x" * 10, limits=limits) == [Pub("t", b"x" * 10)]
    assert str(parse_error(b"PUB t\n" + size(11), limits=limits)) == "E_BAD_MESSAGE PUB message too big 11 > 10"
    assert str(parse_error(b"AUTH\n" + size(101), limits=limits)) == "E_BAD_BODY AUTH body too big 101 > 100"
    assert parse(b"AUTH\n" + size(100) + b"s" * 100, limits=limits) == [Auth(b"s" * 100)]


def test_identify_with_bad_json_body():
    error = parse_error(b"IDENTIFY\n" + size(5) + b"{nope")
    assert str(error) == "E_BAD_BODY IDENTIFY failed to decode JSON body"


def mpub_wire(body: bytes, topic: bytes = b"t") -> bytes:
    return b"MPUB " + topic + b"\n" + size(len(body)) + body


@pytest.mark.parametrize("body, text", [
    (b"\x00\x00", "E_BAD_BODY MPUB failed to read message count"),
    (size(0), "E_BAD_BODY MPUB invalid message count 0"),
    (size(-1), "E_BAD_BODY MPUB invalid message count -1"),
    (size(1048576), "E_BAD_BODY MPUB invalid message count 1048576"),
    (size(2) + size(1) + b"a" + b"\x00", "E_BAD_MESSAGE MPUB failed to read message(1) body size"),
    (size(2) + size(1) + b"a" + size(0), "E_BAD_MESSAGE MPUB invalid message(1) body size 0"),
    (size(1) + size(-7), "E_BAD_MESSAGE MPUB invalid message(0) body size -7"),
    (size(1) + size(1048577), "E_BAD_MESSAGE MPUB message too big 1048577 > 1048576"),
    (size(1) + size(5) + b"abc", "E_BAD_MESSAGE MPUB failed to read message body"),
    (size(2) + size(1) + b"a" + size(1) + b"b" + b"xx",
     "E_BAD_BODY MPUB body size 16 does not match its 2 messages (14 bytes)"),
])
def test_mpub_body_errors(body, text):
    assert str(parse_error(mpub_wire(body))) == text


def test_mpub_message_count_limit_is_max_body_size_minus_4_over_5():
    limits = Limits(max_body_size=104)  # (104 - 4) // 5 == 20 one-byte messages fill it exactly
    twenty = size(20) + (size(1) + b"m") * 20
    assert parse(mpub_wire(twenty), limits=limits) == [Mpub("t", [b"m"] * 20)]
    assert str(parse_error(mpub_wire(size(21)), limits=limits)) == "E_BAD_BODY MPUB invalid message count 21"


def test_mpub_messages_checked_against_max_msg_size():
    limits = Limits(max_msg_size=3)
    assert parse(mpub_wire(size(1) + size(3) + b"abc"), limits=limits) == [Mpub("t", [b"abc"])]
    error = parse_error(mpub_wire(size(1) + size(4) + b"abcd"), limits=limits)
    assert str(error) == "E_BAD_MESSAGE MPUB message too big 4 > 3"


# -- MPUB of messages all of one size (read without a Python step per message) ------------


def same_size_bodies(count: int, length: int) -> list[bytes]:
    return [bytes([n % 256]) * length for n in range(count)]


@pytest.mark.parametrize("count", [1, 2, 255, 256, 257, 600])
def test_an_mpub_of_same_size_messages_gives_every_body_in_order(count):
    bodies = same_size_bodies(count, 5)
    assert parse(Mpub("t", bodies).to_bytes()) == [Mpub("t", bodies)]
    assert parse_mpub_body(Mpub("t", bodies).to_bytes()[len(b"MPUB t\n") + 4:], 5 << 20, 1 << 20) == bodies


def mpub_outcome(body: bytes, exact: bool):
    try:
        return mpub_bodies(body, 0, len(body), 5 << 20, 64, exact=exact)
    except ClientError as err:
        return str(err)


def test_an_mpub_nearly_of_one_size_is_read_as_any_other(monkeypatch):
    """A batch of like messages with one size changed in one byte (or with bytes missing or left
    over) gives what the reading of any batch gives: the same bodies, or the same error."""
    rng = random.Random(22)
    cases = []
    for _ in range(400):
        count, length = rng.randint(1, 300), rng.randint(1, 40)
        body = bytearray(size(count) + b"".join(size(length) + message for message in same_size_bodies(count, length)))
        change = rng.choice(["size byte", "bytes left over", "bytes missing", "none"])
        if change == "size byte":
            where = 4 + rng.randrange(count) * (4 + length) + rng.randrange(4)
            body[where] = rng.choice([0, 1, 0x40, 0x80, 0xFF, body[where] ^ 1])
        elif change == "bytes left over":
            body += bytes(rng.randint(1, 2 * (4 + length)))
        elif change == "bytes missing":
            del body[-rng.randint(1, min(len(body) - 4, 2 * (4 + length))):]
        cases.append((bytes(body), rng.random() < 0.5))
    fast = [mpub_outcome(body, exact) for body, exact in cases]
    monkeypatch.setattr(protocol_v2, "_same_size_bodies", lambda *args: None)
    assert fast == [mpub_outcome(body, exact) for body, exact in cases]


def test_same_size_messages_over_max_msg_size_are_refused_as_any_other():
    body = size(3) + (size(5) + b"hello") * 3
    assert mpub_outcome(body, exact=True) == [b"hello"] * 3
    limits = Limits(max_msg_size=4)
    assert str(parse_error(mpub_wire(body), limits=limits)) == "E_BAD_MESSAGE MPUB message too big 5 > 4"


# -- commands to bytes and back -----------------------------------------------------------

ROUND_TRIPS = [
    (Identify({name: zero for name, (_, zero) in FIELDS.items()} | {"client_id": "x", "snappy": True,
                                                                     "sample_rate": 42}), INIT),
    (Auth(b"s3cr3t \n bytes"), INIT),
    (Sub("topic.a-b_c", "ch#ephemeral"), INIT),
    (Rdy(2500), SUBSCRIBED),
    (Fin(MSG_ID), SUBSCRIBED),
    (Req(MSG_ID, 3_600_000), CLOSING),
    (Touch(MSG_ID), CLOSING),
    (Cls(), SUBSCRIBED),
    (Nop(), CLOSING),
    (Pub("t", b"\x00\n\r\xff"), SUBSCRIBED),
    (Mpub("t", [b"a", b"bb\n", bytes(300)]), INIT),
    (Dpub("t", 0, b"later"), INIT),
]


@pytest.mark.parametrize("event, state", ROUND_TRIPS, ids=lambda value: type(value).__name__)
def test_round_trip(event, state):
    assert parse(event.to_bytes(), state) == [event]


@pytest.mark.parametrize("event, wire", [
    (Pub("test", b"hello"), b"PUB test\n\x00\x00\x00\x05hello"),
    (Fin(MSG_ID), b"FIN 0a1b2c3d4e5f6071\n"),
    (Rdy(100), b"RDY 100\n"),
    (Req(MSG_ID, 5000), b"REQ 0a1b2c3d4e5f6071 5000\n"),
    (Touch(MSG_ID), b"TOUCH 0a1b2c3d4e5f6071\n"),
    (Nop(), b"NOP\n"),
    (Cls(), b"CLS\n"),
    (Sub("t", "c"), b"SUB t c\n"),
    (Auth(b"pw"), b"AUTH\n\x00\x00\x00\x02pw"),
    (Dpub("t", 250, b"x"), b"DPUB t 250\n\x00\x00\x00\x01x"),
    (Mpub("t", [b"one", b"two"]), b"MPUB t\n\x00\x00\x00\x12" + MPUB_BODY),
])
def test_to_bytes_exact(event, wire):
    assert event.to_bytes() == wire


def test_identify_to_bytes_is_a_sized_json_body():
    wire = Identify({"client_id": "é", "heartbeat_interval": -1}).to_bytes()
    assert wire.startswith(b"IDENTIFY\n")
    (length,) = struct.unpack(">i", wire[9:13])
    assert length == len(wire) - 13
    assert json.loads(wire[13:]) == {"client_id": "é", "heartbeat_interval": -1}


def test_magic_constant():
    assert MAGIC_V2 == bytes.fromhex("20205632")


# -- FIN runs (nsqd's fin_runs mode) --------------------------------------------------------

OTHER_ID = b"fedcba9876543210"


def parse_fin_runs(data: bytes, state: State = SUBSCRIBED) -> list:
    parser = CommandParser(fin_runs=True)
    parser.state = state
    parser.receive_data(MAGIC_V2 + data)
    events = drain(parser)
    assert parser.buffered == 0
    return events


def test_consecutive_fins_are_one_run():
    data = b"FIN " + MSG_ID + b"\nFIN " + OTHER_ID + b"\nFIN " + MSG_ID + b"\n"
    assert parse_fin_runs(data) == [FinRun([MSG_ID, OTHER_ID, MSG_ID])]
    assert parse_fin_runs(data, CLOSING) == [FinRun([MSG_ID, OTHER_ID, MSG_ID])]
    assert parse(data, SUBSCRIBED) == [Fin(MSG_ID), Fin(OTHER_ID), Fin(MSG_ID)]  # not asked for


@pytest.mark.parametrize("line, event", [
    (b"FIN " + MSG_ID + b"\r\n", Fin(MSG_ID)),
    (b"FIN " + MSG_ID + b" extra\n", Fin(MSG_ID)),
])
def test_other_fin_forms_end_a_run_and_parse_as_before(line, event):
    run = b"FIN " + OTHER_ID + b"\n"
    assert parse_fin_runs(run + line + run) == [FinRun([OTHER_ID]), event, FinRun([OTHER_ID])]


@pytest.mark.parametrize("line, message", [
    (b"FIN 0a1b2c3d 4e5f6071\n", "E_INVALID invalid message ID"),
    (b"FIN " + MSG_ID + b"0\n", "E_INVALID invalid message ID"),
])
def test_a_bad_fin_after_a_run_is_refused_as_before(line, message):
    parser = CommandParser(fin_runs=True)
    parser.state = SUBSCRIBED
    parser.receive_data(MAGIC_V2 + b"FIN " + OTHER_ID + b"\n" + line)
    assert parser.next_event() == FinRun([OTHER_ID])
    with pytest.raises(ClientError) as info:
        parser.next_event()
    assert str(info.value) == message


def test_fins_where_fin_is_not_allowed_are_refused_as_before():
    parser = CommandParser(fin_runs=True)
    parser.receive_data(MAGIC_V2 + b"FIN " + MSG_ID + b"\n")
    with pytest.raises(ClientError) as info:
        parser.next_event()
    assert str(info.value) == "E_INVALID cannot FIN in current state"


def test_a_run_cut_by_a_receive_goes_on_in_the_next_event():
    parser = CommandParser(fin_runs=True)
    parser.state = SUBSCRIBED
    data = MAGIC_V2 + b"FIN " + MSG_ID + b"\nFIN " + OTHER_ID + b"\n"
    parser.receive_data(data[:-5])
    assert drain(parser) == [FinRun([MSG_ID])]
    parser.receive_data(data[-5:])
    assert drain(parser) == [FinRun([OTHER_ID])]


# -- MPUB topics first (nsqd's mpub_topics mode) ------------------------------------------------


def test_an_mpub_topic_comes_out_as_soon_as_its_line_is_read():
    parser = CommandParser(mpub_topics=True)
    data = MAGIC_V2 + VECTORS["MPUB"][0]
    parser.receive_data(data[:15])
    assert drain(parser) == [MpubTopic("test")]
    parser.receive_data(data[15:])
    assert drain(parser) == [Mpub("test", [b"one", b"two"])]


def test_an_mpub_topic_comes_out_before_a_bad_body_is_refused():
    parser = CommandParser(mpub_topics=True)
    parser.receive_data(MAGIC_V2 + b"MPUB t\n" + size(0))
    assert parser.next_event() == MpubTopic("t")
    with pytest.raises(ClientError) as info:
        parser.next_event()
    assert str(info.value) == "E_BAD_BODY MPUB invalid body size 0"


# -- the end of the connection in the middle of a command -------------------------------------------


@pytest.mark.parametrize("data, text", [
    (b"", None),
    (b"PUB t", None),  # a line without its newline: nsqd says nothing
    (b"PUB t\n\x00\x00", "E_BAD_MESSAGE PUB failed to read message body size"),
    (b"PUB t\n" + size(5) + b"abc", "E_BAD_MESSAGE PUB failed to read message body"),
    (b"DPUB t 5\n", "E_BAD_MESSAGE DPUB failed to read message body size"),
    (b"IDENTIFY\n" + size(9) + b"{", "E_BAD_BODY IDENTIFY failed to read body"),
    (b"AUTH\n", "E_BAD_BODY AUTH failed to read body size"),
    (b"MPUB t\n\x00", "E_BAD_BODY MPUB failed to read body size"),
    (b"MPUB t\n" + size(18) + b"\x00", "E_BAD_BODY MPUB failed to read message count"),
    (b"MPUB t\n" + size(18) + size(2) + size(3) + b"one\x00", "E_BAD_MESSAGE MPUB failed to read message(1) body size"),
    (b"MPUB t\n" + size(18) + size(2) + size(3) + b"on", "E_BAD_MESSAGE MPUB failed to read message body"),
    (b"MPUB t\n" + size(18) + size(1) + size(3) + b"one", None),  # NSQ would publish it; we want the size's worth
])
def test_what_nsqd_says_when_the_connection_ends_mid_command(data, text):
    parser = new_parser()
    parser.receive_data(data)
    assert drain(parser) == []
    err = parser.receive_eof()
    assert (str(err) if err is not None else None) == text


def test_sub_with_heartbeats_disabled_is_refused_before_its_parameters_are_read():
    parser = new_parser()
    parser.heartbeats = False
    parser.receive_data(b"SUB t\n")
    with pytest.raises(ClientError) as info:
        parser.next_event()
    assert str(info.value) == "E_INVALID cannot SUB with heartbeats disabled"


def test_a_lone_nop_is_taken_whole_in_any_state_once_the_magic_is_read():
    parser = CommandParser()
    assert not parser.take_lone_nop(b"NOP\n")  # the magic comes first
    parser.receive_data(b"  V2")
    assert parser.next_event() is NEED_DATA
    for state in (State.INIT, State.SUBSCRIBED, State.CLOSING):
        parser.state = state
        assert parser.take_lone_nop(b"NOP\n")
        assert (parser.buffered, parser.next_event()) == (0, NEED_DATA)


@pytest.mark.parametrize("read", [b"NOP\r\n", b"NOP\nNOP\n", b"NOP", b"RDY 1\n"])
def test_a_read_that_is_not_one_nop_is_left_to_the_parser(read):
    parser = CommandParser(expect_magic=False)
    assert not parser.take_lone_nop(read)
    assert parser.buffered == 0


def test_a_nop_after_bytes_already_buffered_or_before_tls_is_left_to_the_parser():
    parser = CommandParser(expect_magic=False)
    parser.receive_data(b"PU")
    assert not parser.take_lone_nop(b"NOP\n")
    assert parser.buffered == 2
    assert not CommandParser(expect_magic=False, tls_required=True).take_lone_nop(b"NOP\n")
