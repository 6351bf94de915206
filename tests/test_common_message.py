"""common/message.py: the message layout, on the wire and on disk (NSQ v1.3's nsqd/message.go)."""

import pytest

from common.message import (
    HEADER_LENGTH, MIN_MESSAGE_LENGTH, MSG_ID_LENGTH, Message, decode_message, encode_header, encode_message,
    header_attempts, header_id, with_attempts,
)

MSG_ID = b"0a1b2c3d4e5f6071"
TIMESTAMP = 0x17A2B3C4D5E6F708


def test_lengths():
    assert (MSG_ID_LENGTH, HEADER_LENGTH, MIN_MESSAGE_LENGTH) == (16, 26, 26)


def test_encode_exact_bytes():
    wire = encode_message(TIMESTAMP, 1, MSG_ID, b"hello")
    assert wire == bytes.fromhex("17a2b3c4d5e6f708" "0001") + b"0a1b2c3d4e5f6071" + b"hello"


def test_header_is_the_first_26_bytes():
    header = encode_header(TIMESTAMP, 258, MSG_ID)
    assert header == bytes.fromhex("17a2b3c4d5e6f708" "0102") + MSG_ID
    assert len(header) == HEADER_LENGTH


@pytest.mark.parametrize("attempts, wire", [(0, "0000"), (65535, "ffff"), (65536, "0000"), (65537, "0001")])
def test_attempts_are_uint16_and_wrap(attempts, wire):
    assert encode_header(0, attempts, MSG_ID)[8:10] == bytes.fromhex(wire)


def test_timestamp_is_signed_int64():
    assert encode_header(-1, 0, MSG_ID)[:8] == b"\xff" * 8
    assert encode_header(2**63 - 1, 0, MSG_ID)[:8] == bytes.fromhex("7fffffffffffffff")


def test_decode_exact_bytes():
    wire = bytes.fromhex("0000000000000001" "0003") + MSG_ID + b"\x00body\n"
    assert decode_message(wire) == Message(1, 3, MSG_ID, b"\x00body\n")


def test_round_trip():
    message = Message(1_700_000_000_123_456_789, 7, MSG_ID, bytes(range(256)))
    assert decode_message(encode_message(*message)) == message


def test_26_bytes_is_a_message_with_an_empty_body():
    assert decode_message(encode_header(5, 1, MSG_ID)) == Message(5, 1, MSG_ID, b"")


@pytest.mark.parametrize("length", [0, 10, 25])
def test_shorter_than_26_bytes_is_invalid(length):
    with pytest.raises(ValueError, match=rf"invalid message buffer size \({length}\)"):
        decode_message(bytes(length))


def test_decode_accepts_memoryview_and_returns_bytes():
    message = decode_message(memoryview(encode_message(9, 2, MSG_ID, b"x")))
    assert message == Message(9, 2, MSG_ID, b"x")
    assert type(message.id) is bytes and type(message.body) is bytes


def test_header_accessors():
    header = encode_header(TIMESTAMP, 513, MSG_ID)
    assert header_attempts(header) == 513
    assert header_id(header) == MSG_ID


def test_with_attempts_changes_only_the_attempts():
    header = encode_header(TIMESTAMP, 1, MSG_ID)
    bumped = with_attempts(header, 2)
    assert bumped == encode_header(TIMESTAMP, 2, MSG_ID)
    assert with_attempts(header, 65536) == encode_header(TIMESTAMP, 0, MSG_ID)
    assert header == encode_header(TIMESTAMP, 1, MSG_ID)
