"""Property-based tests of common/'s sans-IO parsers (and serving/'s query parser) on hostile input.

For every parser: arbitrary bytes, valid streams cut at arbitrary points, and valid streams
with bytes flipped, inserted, deleted or cut off. Whatever arrives, a parser gives events
or its protocol's own error (ClientError, FrameError, ResponseError, CompressionError,
HTTPError, or ValueError for a message buffer), never any other exception; what it holds
while waiting for more stays within its configured maximums; and how the bytes are cut
into receives never changes what it parses.
"""

import json
import string
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common import protocol_v1
from common.commands import MAGIC_V2, Auth, Cls, Dpub, Fin, Identify, Mpub, Nop, Pub, Rdy, Req, Sub, Touch
from common.compression import MAX_CHUNK_LENGTH, MAX_DECODED_PIECE, CompressionError, DeflateCodec, SnappyCodec
from common.errors import ClientError
from common.frames import Frame, FrameError, FrameReader, encode_frame
from common.goquote import go_quote
from common.identify import FIELDS, decode_identify
from common.message import HEADER_LENGTH, decode_message, encode_message
from common.protocol_v1 import MAGIC_V1, Ping, Register, ResponseError, ResponseReader, ServerParser, Unregister
from common.protocol_v2 import MAX_LINE_LENGTH, NEED_DATA, CommandParser, Limits, State, parse_mpub_body
from serving.v1 import HTTPError, parse_query

# Small limits, so that bounds are reached and checked within a few examples.
LIMITS = Limits(max_body_size=4096, max_msg_size=1024, max_rdy_count=2500, max_req_timeout_ms=60_000)
V2_BUFFER_BOUND = MAX_LINE_LENGTH + 4 + max(LIMITS.max_body_size, LIMITS.max_msg_size)
V1_MAX_BODY = 2048
V1_BUFFER_BOUND = protocol_v1.MAX_LINE_LENGTH + 4 + V1_MAX_BODY
MAX_FRAME = 4096

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.from_regex(r"[.a-zA-Z0-9_-]{1,60}(#ephemeral)?", fullmatch=True).filter(lambda n: len(n) <= 64)
message_ids = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16).map(str.encode)
bodies = st.binary(min_size=1, max_size=200)
TOKENS = [b"\x00", b"\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00\x00\x05", b"\x00\x00\x00\x01",
          b"PUB", b"MPUB", b"DPUB", b"SUB", b"RDY", b"FIN", b"REQ", b"TOUCH", b"IDENTIFY", b"AUTH", b"NOP", b"CLS",
          b"PING", b"REGISTER", b"UNREGISTER", b"t", b"c", b"1000", b"-1", b"0a1b2c3d4e5f6071", b"{}", b"\xc3\x28"]
tokens = st.tuples(st.sampled_from(TOKENS), st.sampled_from([b"", b" ", b"\n", b"\r\n"])).map(b"".join)
hostile = st.binary(max_size=600) | st.lists(tokens, max_size=40).map(b"".join)


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` split at the given offsets (taken modulo its length, sorted)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


@st.composite
def mutated(draw, valid: bytes) -> bytes:
    """``valid`` with a few bytes flipped, inserted or deleted, or cut short."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "size"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and data:
            del data[at:at + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del data[at:]
        elif kind == "size":
            data[at:at] = struct.pack(">i", draw(st.sampled_from([-1, 0, 1, 2**31 - 1, -(2**31), 5000, 1025])))
    return bytes(data)


# -- V2: nsqd's command parser ------------------------------------------------------------------


def identify_data():
    value = {str: st.text(max_size=20), bool: st.booleans(), int: st.integers(-(2**31), 2**31 - 1)}
    return st.fixed_dictionaries({}, optional={name: value[kind] for name, (kind, _) in FIELDS.items()})


init_commands = st.one_of(
    identify_data().map(Identify),
    st.binary(min_size=1, max_size=64).map(Auth),
    st.builds(Pub, names, bodies),
    st.builds(Mpub, names, st.lists(bodies, min_size=1, max_size=5)),
    st.builds(Dpub, names, st.integers(0, LIMITS.max_req_timeout_ms), bodies),
    st.just(Nop()),
)
subscribed_commands = st.one_of(
    st.integers(0, LIMITS.max_rdy_count).map(Rdy),
    st.builds(Fin, message_ids),
    st.builds(Req, message_ids, st.integers(0, 10 * LIMITS.max_req_timeout_ms)),
    st.builds(Touch, message_ids),
    st.builds(Pub, names, bodies),
    st.just(Nop()),
)
closing_commands = st.one_of(
    st.builds(Fin, message_ids), st.builds(Touch, message_ids), st.builds(Pub, names, bodies), st.just(Nop()))


@st.composite
def v2_sessions(draw) -> list:
    """Commands a well-behaved client may send in order: init, then maybe SUB, then maybe CLS."""
    commands = draw(st.lists(init_commands, max_size=4))
    if draw(st.booleans()):
        commands.append(Sub(draw(names), draw(names)))
        commands += draw(st.lists(subscribed_commands, max_size=6))
        if draw(st.booleans()):
            commands.append(Cls())
            commands += draw(st.lists(closing_commands, max_size=3))
    return commands


def v2_expected(command):
    """The event nsqd's parser makes of a command a client encoded."""
    if isinstance(command, Identify):
        return Identify({name: zero for name, (_, zero) in FIELDS.items()} | command.data)
    if isinstance(command, Req):
        return Req(command.id, min(command.timeout_ms, LIMITS.max_req_timeout_ms))
    return command


def run_v2(chunks: list[bytes]) -> tuple[list, tuple | None]:
    """Feed the chunks as nsqd does (state moved on after SUB and CLS, stop at the first error);
    the events and the error's (code, description). Checks the buffer bound after each receive."""
    parser = CommandParser(LIMITS)
    events = []
    for chunk in chunks:
        parser.receive_data(chunk)
        try:
            while (event := parser.next_event()) is not NEED_DATA:
                events.append(event)
                if isinstance(event, Sub):
                    parser.state = State.SUBSCRIBED
                elif isinstance(event, Cls):
                    parser.state = State.CLOSING
        except ClientError as err:
            assert err.fatal
            assert err.code.startswith("E_")
            err.to_bytes()
            return events, (err.code, err.description)
        assert parser.buffered < V2_BUFFER_BOUND
    return events, None


def v2_stream(commands) -> bytes:
    return MAGIC_V2 + b"".join(command.to_bytes() for command in commands)


@FUZZ
@given(v2_sessions(), st.lists(st.integers(0, 10_000), max_size=12))
def test_v2_valid_sessions_parse_the_same_however_they_are_cut(commands, cuts):
    data = v2_stream(commands)
    expected = [v2_expected(command) for command in commands]
    assert run_v2([data]) == (expected, None)
    assert run_v2(cut(data, cuts)) == (expected, None)


@FUZZ
@given(hostile, st.booleans(), st.lists(st.integers(0, 1000), max_size=6))
def test_v2_arbitrary_bytes_give_events_or_a_client_error(data, with_magic, cuts):
    stream = (MAGIC_V2 if with_magic else b"") + data
    assert run_v2(cut(stream, cuts)) == run_v2([stream])


@FUZZ
@given(st.data())
def test_v2_mutated_sessions_give_events_or_a_client_error(data):
    stream = MAGIC_V2 + data.draw(mutated(v2_stream(data.draw(v2_sessions()))[len(MAGIC_V2):]))
    cuts = data.draw(st.lists(st.integers(0, 10_000), max_size=8))
    assert run_v2(cut(stream, cuts)) == run_v2([stream])


@FEW
@given(st.sampled_from([b"PUB t\n", b"DPUB t 10\n", b"MPUB t\n", b"IDENTIFY\n", b"AUTH\n"]),
       st.integers(-(2**31), 2**31 - 1), st.integers(1, 8))
def test_v2_declared_sizes_are_checked_before_the_body_is_buffered(line, size, pieces):
    """However big the declared size, the parser refuses it or waits for at most that many bytes."""
    chunk = b"\xab" * (V2_BUFFER_BOUND // 4)
    events, error = run_v2([MAGIC_V2 + line + struct.pack(">i", size)] + [chunk] * pieces)
    assert error is not None or events or size <= LIMITS.max_body_size


def test_v2_endless_line_is_refused_at_the_line_limit():
    parser = CommandParser(LIMITS)
    parser.receive_data(MAGIC_V2)
    with pytest.raises(ClientError) as info:
        for _ in range(10):
            parser.receive_data(b"x" * (MAX_LINE_LENGTH // 3))
            assert parser.next_event() is NEED_DATA
            assert parser.buffered < MAX_LINE_LENGTH
    assert info.value.code == "E_INVALID"


@FUZZ
@given(st.binary(max_size=400))
def test_v2_mpub_body_gives_bodies_or_a_client_error(body):
    try:
        messages = parse_mpub_body(body, LIMITS.max_body_size, LIMITS.max_msg_size)
    except ClientError as err:
        assert err.code in ("E_BAD_BODY", "E_BAD_MESSAGE")
        return
    assert all(0 < len(message) <= LIMITS.max_msg_size for message in messages)
    encoded = Mpub("t", messages).to_bytes()[len(b"MPUB t\n") + 4:]
    assert body.startswith(encoded)  # what follows the messages is ignored, as nsqd's HTTP /mpub does


# -- IDENTIFY bodies ---------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from([*FIELDS, "CLIENT_ID", "Heartbeat_Interval", "other"]) | st.text(max_size=5), inner, max_size=5),
    max_leaves=12)


@FUZZ
@given(st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))
def test_identify_body_decodes_or_is_e_bad_body(body):
    try:
        data = decode_identify(body)
    except ClientError as err:
        assert (err.code, err.description) == ("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        return
    assert set(data) == set(FIELDS)
    assert all(type(data[name]) is kind for name, (kind, _) in FIELDS.items())


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 100_000, b"\xff" * 10_000, b'"' + b"\\" * 5001])
def test_identify_pathological_bodies_are_e_bad_body(body):
    with pytest.raises(ClientError) as info:
        decode_identify(body)
    assert info.value.code == "E_BAD_BODY"


# -- V1: nsqlookupd's command parser ------------------------------------------------------------------

peer_infos = st.fixed_dictionaries({
    "broadcast_address": st.text(min_size=1, max_size=20), "hostname": st.text(max_size=20),
    "tcp_port": st.integers(1, 65535), "http_port": st.integers(1, 65535), "version": st.text(min_size=1, max_size=8),
})
v1_commands = st.one_of(
    st.just(Ping()),
    st.builds(Register, names, st.just("") | names),
    st.builds(Unregister, names, st.just("") | names),
)


@st.composite
def v1_sessions(draw) -> list:
    commands = draw(st.lists(st.just(Ping()), max_size=2))
    commands.append(protocol_v1.Identify(draw(peer_infos)))
    return commands + draw(st.lists(v1_commands, max_size=8))


def v1_expected(command):
    if isinstance(command, protocol_v1.Identify):
        return protocol_v1.Identify({"remote_address": ""} | {
            name: json.loads(json.dumps(command.data[name])) for name in protocol_v1.PEER_INFO_FIELDS if name in command.data})
    return command


def run_v1(chunks: list[bytes]) -> tuple[list, tuple | None]:
    parser = ServerParser(max_body_size=V1_MAX_BODY)
    events = []
    for chunk in chunks:
        parser.receive_data(chunk)
        try:
            while (event := parser.next_event()) is not protocol_v1.NEED_DATA:
                events.append(event)
        except ClientError as err:
            assert err.fatal and err.code.startswith("E_")
            protocol_v1.encode_error(err)
            return events, (err.code, err.description)
        assert parser.buffered < V1_BUFFER_BOUND
    at_eof = parser.receive_eof()
    return events, None if at_eof is None else ("EOF", at_eof.code, at_eof.description)


def v1_stream(commands) -> bytes:
    return MAGIC_V1 + b"".join(command.to_bytes() for command in commands)


@FUZZ
@given(v1_sessions(), st.lists(st.integers(0, 5000), max_size=10))
def test_v1_valid_sessions_parse_the_same_however_they_are_cut(commands, cuts):
    data = v1_stream(commands)
    expected = [v1_expected(command) for command in commands]
    assert run_v1([data]) == (expected, None)
    assert run_v1(cut(data, cuts)) == (expected, None)


@FUZZ
@given(hostile, st.booleans(), st.lists(st.integers(0, 1000), max_size=6))
def test_v1_arbitrary_bytes_give_events_or_a_client_error(data, with_magic, cuts):
    stream = (MAGIC_V1 if with_magic else b"") + data
    assert run_v1(cut(stream, cuts)) == run_v1([stream])


@FUZZ
@given(st.data())
def test_v1_mutated_sessions_give_events_or_a_client_error(data):
    stream = MAGIC_V1 + data.draw(mutated(v1_stream(data.draw(v1_sessions()))[len(MAGIC_V1):]))
    cuts = data.draw(st.lists(st.integers(0, 5000), max_size=8))
    assert run_v1(cut(stream, cuts)) == run_v1([stream])


@FUZZ
@given(st.lists(st.binary(max_size=300), max_size=6), st.lists(st.integers(0, 2000), max_size=6))
def test_v1_response_reader_gives_replies_or_a_response_error(replies, cuts):
    data = b"".join(protocol_v1.encode_response(reply) for reply in replies)
    assert read_replies(cut(data, cuts)) == (replies, None)


@FUZZ
@given(hostile, st.lists(st.integers(0, 1000), max_size=6))
def test_v1_response_reader_on_arbitrary_bytes(data, cuts):
    assert read_replies(cut(data, cuts)) == read_replies([data])


def read_replies(chunks: list[bytes]) -> tuple[list[bytes], str | None]:
    reader = ResponseReader(max_size=1024)
    replies = []
    for chunk in chunks:
        reader.receive_data(chunk)
        try:
            while (reply := reader.next_response()) is not None:
                replies.append(reply)
        except ResponseError as err:
            return replies, str(err)
        assert reader.buffered < 4 + 1024
    return replies, None


# -- frames and messages (the client side of V2) ------------------------------------------------------


def read_frames(chunks: list[bytes]) -> tuple[list[Frame], str | None]:
    reader = FrameReader(max_frame_size=MAX_FRAME)
    frames = []
    for chunk in chunks:
        reader.receive_data(chunk)
        try:
            frames += reader.frames()
        except FrameError as err:
            return frames, str(err)
        assert reader.buffered < 4 + MAX_FRAME
    return frames, None


frames = st.builds(Frame, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=300))


@FUZZ
@given(st.lists(frames, max_size=8), st.lists(st.integers(0, 3000), max_size=10))
def test_frames_split_anywhere_read_back_whole(sent, cuts):
    data = b"".join(encode_frame(frame.frame_type, frame.data) for frame in sent)
    assert read_frames(cut(data, cuts)) == (sent, None)


@FUZZ
@given(hostile, st.lists(st.integers(0, 1000), max_size=6))
def test_frame_reader_on_arbitrary_bytes(data, cuts):
    assert read_frames(cut(data, cuts)) == read_frames([data])


@FUZZ
@given(st.binary(max_size=100))
def test_message_decodes_or_is_a_value_error(data):
    try:
        message = decode_message(data)
    except ValueError:
        assert len(data) < HEADER_LENGTH
        return
    assert encode_message(message.timestamp, message.attempts, message.id, message.body) == data


# -- stream compression ---------------------------------------------------------------------------------


def decode_all(codec, chunks: list[bytes]) -> tuple[bytes, bool]:
    """Everything the codec decodes from the chunks, draining its backlog as nsqd's reader does;
    and whether it refused the input."""
    out = []
    try:
        for chunk in chunks:
            piece = codec.decode(chunk)
            assert len(piece) <= MAX_DECODED_PIECE
            out.append(piece)
            while codec.backlog:
                piece = codec.decode(b"")
                assert len(piece) <= MAX_DECODED_PIECE
                out.append(piece)
    except CompressionError:
        return b"".join(out), True
    return b"".join(out), False


@FEW
@given(st.lists(st.binary(max_size=2000), max_size=5), st.lists(st.integers(0, 20_000), max_size=8))
def test_snappy_stream_cut_anywhere_decodes_to_what_was_sent(writes, cuts):
    encoder = SnappyCodec()
    stream = b"".join(encoder.encode(write) for write in writes)
    assert decode_all(SnappyCodec(), cut(stream, cuts)) == (b"".join(writes), False)


@FEW
@given(st.lists(st.binary(max_size=2000), max_size=5), st.integers(0, 9), st.lists(st.integers(0, 20_000), max_size=8))
def test_deflate_stream_cut_anywhere_decodes_to_what_was_sent(writes, level, cuts):
    encoder = DeflateCodec(level)
    stream = b"".join(encoder.encode(write) for write in writes)
    assert decode_all(DeflateCodec(level), cut(stream, cuts)) == (b"".join(writes), False)


@FUZZ
@given(st.sampled_from([SnappyCodec, lambda: DeflateCodec(6)]), hostile, st.booleans())
def test_codecs_on_arbitrary_bytes_decode_or_refuse(make_codec, data, as_snappy_stream):
    codec = make_codec()
    prefix = codec.encode(b"hello") if as_snappy_stream else b""
    decode_all(codec, [prefix + data])
    if isinstance(codec, SnappyCodec):
        assert len(codec._pending) < 4 + MAX_CHUNK_LENGTH


@FUZZ
@given(st.data())
def test_codecs_on_mutated_streams_decode_or_refuse(data):
    level = data.draw(st.integers(1, 9))
    make_codec = data.draw(st.sampled_from([SnappyCodec, lambda: DeflateCodec(level)]))
    encoder = make_codec()
    stream = b"".join(encoder.encode(write) for write in data.draw(st.lists(st.binary(max_size=500), max_size=4)))
    decode_all(make_codec(), cut(data.draw(mutated(stream)), data.draw(st.lists(st.integers(0, 5000), max_size=5))))


def test_deflate_bomb_decodes_a_bounded_piece_at_a_time():
    bomb = DeflateCodec(9).encode(b"\x00" * (20 * MAX_DECODED_PIECE))
    decoded, refused = decode_all(DeflateCodec(9), [bomb])
    assert (len(decoded), refused) == (20 * MAX_DECODED_PIECE, False)


# -- error texts and HTTP query strings -----------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=100) | st.text(max_size=100))
def test_go_quote_quotes_anything(raw):
    quoted = go_quote(raw)
    assert quoted.startswith('"') and quoted.endswith('"')
    assert all(ch.isprintable() for ch in quoted)


query_text = st.text(alphabet=string.ascii_letters + string.digits + "%&=;+#?/ \x00\u00e9\ud800\U0001f600", max_size=80)


@FUZZ
@given(query_text | st.binary(max_size=80).map(lambda raw: raw.decode("latin-1")))
def test_query_string_parses_or_is_invalid_request(raw):
    try:
        values = parse_query(raw)
    except HTTPError as err:
        assert (err.status, err.text) == (400, "INVALID_REQUEST")
        return
    assert all(isinstance(key, str) and all(isinstance(v, str) for v in vals) for key, vals in values.items())
