"""common/protocol_v1.py: the V1 lookup protocol, byte for byte, both sides
(NSQ v1.3's nsqlookupd/lookup_protocol_v1.go)."""

import json
import struct

import pytest

from common.errors import ClientError
from common.protocol_v1 import (
    DEFAULT_MAX_BODY_SIZE, MAGIC_V1, MAX_LINE_LENGTH, NEED_DATA, Identify, Ping, Register, ResponseError,
    ResponseReader, ServerParser, Unregister, decode_peer_info, encode_error, encode_response, is_error,
)


def size(n: int) -> bytes:
    return struct.pack(">i", n)


PEER = {"broadcast_address": "h1", "hostname": "h1", "http_port": 4151, "tcp_port": 4150, "version": "1.3.0"}
# The exchange of NSQ's nsqd/lookup_peer.go and nsqlookupd/lookup_protocol_v1.go: nsqd's IDENTIFY body is
# 0x5d bytes, keys sorted.
PEER_BODY = b'{"broadcast_address":"h1","hostname":"h1","http_port":4151,"tcp_port":4150,"version":"1.3.0"}'
PEER_INFO = {"remote_address": "", "hostname": "h1", "broadcast_address": "h1", "tcp_port": 4150,
             "http_port": 4151, "version": "1.3.0"}
IDENTIFY_WIRE = b"IDENTIFY\n\x00\x00\x00\x5d" + PEER_BODY


def events(parser: ServerParser, data: bytes) -> list:
    parser.receive_data(data)
    out = []
    while (event := parser.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def identified() -> ServerParser:
    parser = ServerParser()
    assert events(parser, MAGIC_V1 + IDENTIFY_WIRE) == [Identify(PEER_INFO)]
    return parser


def error_of(parser: ServerParser, data: bytes) -> str:
    parser.receive_data(data)
    with pytest.raises(ClientError) as info:
        while parser.next_event() is not NEED_DATA:
            pass
    assert info.value.fatal
    return str(info.value)


# -- client-side encoders --------------------------------------------------------------------


def test_client_commands_are_nsqds_bytes():
    assert MAGIC_V1 == b"  V1"
    assert Identify(PEER).to_bytes() == IDENTIFY_WIRE
    assert Identify({"version": "1.3.0", "tcp_port": 4150, "http_port": 4151, "hostname": "h1",
                     "broadcast_address": "h1"}).to_bytes() == IDENTIFY_WIRE  # sorted like a Go map
    assert Register("orders", "billing").to_bytes() == b"REGISTER orders billing\n"
    assert Register("orders").to_bytes() == b"REGISTER orders\n"
    assert Unregister("orders", "billing").to_bytes() == b"UNREGISTER orders billing\n"
    assert Unregister("orders").to_bytes() == b"UNREGISTER orders\n"
    assert Ping().to_bytes() == b"PING\n"


def test_every_reply_is_size_prefixed():
    assert encode_response(b"OK") == b"\x00\x00\x00\x02OK"
    assert encode_response(b"") == b"\x00\x00\x00\x00"
    assert encode_error(ClientError("E_INVALID", "client must IDENTIFY")) == b"\x00\x00\x00\x1eE_INVALID client must IDENTIFY"
    assert encode_error(ClientError("E_BAD_PROTOCOL")) == b"\x00\x00\x00\x0eE_BAD_PROTOCOL"
    assert is_error(b"E_BAD_TOPIC REGISTER topic name 'a b' is not valid")
    assert not is_error(b"OK") and not is_error(b'{"tcp_port":4160}')


def test_response_reader_splits_and_joins_replies():
    reader = ResponseReader()
    wire = encode_response(b"OK") + encode_response(b'{"version":"1.3.0"}') + encode_response(b"")
    for i in range(len(wire)):  # one byte at a time
        reader.receive_data(wire[i:i + 1])
    got = []
    while (reply := reader.next_response()) is not None:
        got.append(reply)
    assert got == [b"OK", b'{"version":"1.3.0"}', b""]
    reader.receive_data(wire[:5])
    assert reader.next_response() is None


def test_response_reader_refuses_oversized_and_negative_sizes_before_buffering():
    reader = ResponseReader(max_size=10)
    reader.receive_data(size(11))
    with pytest.raises(ResponseError, match=r"response body size \(11\) is greater than limit \(10\)"):
        reader.next_response()
    reader = ResponseReader()
    reader.receive_data(size(-1))
    with pytest.raises(ResponseError):
        reader.next_response()


# -- server-side parser: commands ------------------------------------------------------------


def test_ping_is_allowed_before_identify():
    assert events(ServerParser(), MAGIC_V1 + b"PING\n") == [Ping()]


def test_identify_then_register_and_unregister():
    parser = identified()
    assert parser.identified
    wire = (b"REGISTER orders billing\nREGISTER orders\nUNREGISTER orders billing\nUNREGISTER orders\n"
            b"REGISTER t#ephemeral c#ephemeral\nPING extra params\n")
    assert events(parser, wire) == [
        Register("orders", "billing"), Register("orders", ""), Unregister("orders", "billing"),
        Unregister("orders", ""), Register("t#ephemeral", "c#ephemeral"), Ping(),
    ]


def test_lines_are_trimmed_like_go_trimspace_and_split_on_single_spaces():
    parser = identified()
    assert events(parser, b"  REGISTER a b \r\n\tPING\x0b\n") == [Register("a", "b"), Ping()]
    # "t  c": the second parameter is empty, so only the topic registers (Go's strings.Split).
    assert events(parser, b"REGISTER t  c\n") == [Register("t", "")]
    # Extra parameters are ignored.
    assert events(parser, b"REGISTER t c extra\n") == [Register("t", "c")]
    # Go trims Unicode spaces (NBSP here) but not \x1c, which Python's strip() would.
    assert events(parser, "REGISTER t\u00a0\n".encode()) == [Register("t", "")]
    assert error_of(identified(), b"REGISTER t\x1c\n") == "E_BAD_TOPIC REGISTER topic name 't\x1c' is not valid"


def test_commands_split_across_receives():
    parser = ServerParser()
    wire = MAGIC_V1 + IDENTIFY_WIRE + b"REGISTER a b\nPING\n"
    got = []
    for i in range(len(wire)):
        got += events(parser, wire[i:i + 1])
    assert got == [Identify(PEER_INFO), Register("a", "b"), Ping()]
    assert parser.buffered == 0


def test_identify_body_fields_are_typed_with_go_zero_values():
    body = b'{"broadcast_address":"b","tcp_port":1,"http_port":2,"version":"v","extra":[1,2],"hostname":null}'
    assert decode_peer_info(body) == {"remote_address": "", "hostname": "", "broadcast_address": "b",
                                      "tcp_port": 1, "http_port": 2, "version": "v"}
    # Go matches keys case-insensitively and the last duplicate wins; remote_address is accepted (nsqlookupd overwrites it).
    body = b'{"Broadcast_Address":"x","broadcast_address":"b","TCP_PORT":1,"http_port":2,"version":"v","remote_address":"r"}'
    assert decode_peer_info(body)["broadcast_address"] == "b"
    assert decode_peer_info(body)["tcp_port"] == 1
    assert decode_peer_info(body)["remote_address"] == "r"
    # Negative ports pass: nsqlookupd only checks for zero.
    assert decode_peer_info(b'{"broadcast_address":"b","tcp_port":-1,"http_port":2,"version":"v"}')["tcp_port"] == -1


# -- server-side parser: NSQ's errors -----------------------------------------------------------


@pytest.mark.parametrize("wire, error", [
    (b"  V2", "E_BAD_PROTOCOL"),
    (b"GET / HTTP/1.1\r\n", "E_BAD_PROTOCOL"),
    (MAGIC_V1 + b"FOO\n", "E_INVALID invalid command FOO"),
    (MAGIC_V1 + b"ping\n", "E_INVALID invalid command ping"),
    (MAGIC_V1 + b"\n", "E_INVALID invalid command "),
    (MAGIC_V1 + b"REGISTER t c\n", "E_INVALID client must IDENTIFY"),
    (MAGIC_V1 + b"UNREGISTER t\n", "E_INVALID client must IDENTIFY"),
    (MAGIC_V1 + b"REGISTER\n", "E_INVALID client must IDENTIFY"),  # the IDENTIFY check comes first
])
def test_errors_before_identify(wire, error):
    assert error_of(ServerParser(), wire) == error


@pytest.mark.parametrize("wire, error", [
    (b"REGISTER\n", "E_INVALID REGISTER insufficient number of params"),
    (b"UNREGISTER \n", "E_INVALID UNREGISTER insufficient number of params"),
    (b"REGISTER bad*topic\n", "E_BAD_TOPIC REGISTER topic name 'bad*topic' is not valid"),
    (b"UNREGISTER  t\n", "E_BAD_TOPIC UNREGISTER topic name '' is not valid"),
    (b"REGISTER " + b"t" * 65 + b"\n", "E_BAD_TOPIC REGISTER topic name '" + "t" * 65 + "' is not valid"),
    (b"REGISTER t bad!channel\n", "E_BAD_CHANNEL REGISTER channel name 'bad!channel' is not valid"),
    (b"UNREGISTER t c#ephemeral#ephemeral\n",
     "E_BAD_CHANNEL UNREGISTER channel name 'c#ephemeral#ephemeral' is not valid"),
    (IDENTIFY_WIRE, "E_INVALID cannot IDENTIFY again"),
    (b"IDENTIFY\n", "E_INVALID cannot IDENTIFY again"),  # refused before the body is read
])
def test_errors_after_identify(wire, error):
    assert error_of(identified(), wire) == error


@pytest.mark.parametrize("body, error", [
    (b"", "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"{", "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"[]", "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b'{"broadcast_address":"b","tcp_port":"4150","http_port":2,"version":"v"}',
     "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b'{"broadcast_address":"b","tcp_port":4150.5,"http_port":2,"version":"v"}',
     "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b'{"broadcast_address":"b","tcp_port":1,"http_port":99999999999999999999,"version":"v"}',
     "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b'{"broadcast_address":1,"tcp_port":1,"http_port":2,"version":"v"}', "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b'{"broadcast_address":"b","tcp_port":1,"http_port":2,"version":"v","x":NaN}',
     "E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"null", "E_BAD_BODY IDENTIFY missing fields"),
    (b"{}", "E_BAD_BODY IDENTIFY missing fields"),
    (b'{"tcp_port":1,"http_port":2,"version":"v"}', "E_BAD_BODY IDENTIFY missing fields"),
    (b'{"broadcast_address":"b","http_port":2,"version":"v"}', "E_BAD_BODY IDENTIFY missing fields"),
    (b'{"broadcast_address":"b","tcp_port":1,"version":"v"}', "E_BAD_BODY IDENTIFY missing fields"),
    (b'{"broadcast_address":"b","tcp_port":1,"http_port":2,"version":""}', "E_BAD_BODY IDENTIFY missing fields"),
])
def test_identify_body_errors(body, error):
    parser = ServerParser()
    assert error_of(parser, MAGIC_V1 + b"IDENTIFY\n" + size(len(body)) + body) == error
    assert not parser.identified


def test_identify_sizes_are_bounded_before_the_body_is_buffered():
    parser = ServerParser(max_body_size=100)
    assert error_of(parser, MAGIC_V1 + b"IDENTIFY\n" + size(101)) == "E_BAD_BODY IDENTIFY body too big 101 > 100"
    assert error_of(ServerParser(), MAGIC_V1 + b"IDENTIFY\n" + size(-1)) == "E_BAD_BODY IDENTIFY invalid body size -1"
    assert DEFAULT_MAX_BODY_SIZE == 1024 * 1024
    parser = ServerParser()
    assert events(parser, MAGIC_V1 + b"IDENTIFY\n" + size(len(PEER_BODY)) + PEER_BODY[:10]) == []
    assert events(parser, PEER_BODY[10:]) == [Identify(PEER_INFO)]


def test_command_lines_are_bounded():
    parser = ServerParser()
    assert events(parser, MAGIC_V1 + b"X" * (MAX_LINE_LENGTH - 1)) == []  # not yet over the limit
    assert error_of(parser, b"X") == f"E_INVALID command line longer than {MAX_LINE_LENGTH} bytes"
    # A line of exactly MAX_LINE_LENGTH bytes, newline included, is still read.
    parser = ServerParser()
    assert error_of(parser, MAGIC_V1 + b"X" * (MAX_LINE_LENGTH - 1) + b"\n").startswith("E_INVALID invalid command XXX")


def test_errors_quote_bytes_as_sent():
    assert error_of(ServerParser(), MAGIC_V1 + b"\xff\xfe\n").encode("utf-8", "surrogateescape") \
        == b"E_INVALID invalid command \xff\xfe"
    err = ClientError("E_INVALID", "invalid command \udcff")
    assert encode_error(err) == size(27) + b"E_INVALID invalid command \xff"


def test_end_of_stream_inside_identify_gets_nsqs_reply():
    parser = ServerParser()
    assert events(parser, MAGIC_V1 + b"IDENTIFY\n\x00\x00") == []
    assert str(parser.receive_eof()) == "E_BAD_BODY IDENTIFY failed to read body size"
    parser = ServerParser()
    assert events(parser, MAGIC_V1 + b"IDENTIFY\n" + size(10) + b"{}") == []
    assert str(parser.receive_eof()) == "E_BAD_BODY IDENTIFY failed to read body"
    parser = ServerParser()
    assert events(parser, MAGIC_V1 + b"REGIS") == []
    assert parser.receive_eof() is None  # a partial line just ends the connection


def test_identify_reply_is_json_the_client_can_read():
    # What nsqd's lookup peer does with the reply: size-prefixed JSON, not an error.
    reader = ResponseReader()
    reader.receive_data(encode_response(json.dumps({"tcp_port": 4160}).encode()))
    reply = reader.next_response()
    assert not is_error(reply) and json.loads(reply) == {"tcp_port": 4160}
