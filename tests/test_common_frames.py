"""common/frames.py: nsqd -> client frames, byte for byte (NSQ v1.3's internal/protocol/protocol.go)."""

import pytest

from common.frames import (
    CLOSE_WAIT, FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, HEARTBEAT, OK, Frame, FrameError,
    FrameReader, encode_error, encode_frame, encode_response,
)
from common.message import encode_message

OK_FRAME = bytes.fromhex("00000006 00000000") + b"OK"
HEARTBEAT_FRAME = bytes.fromhex("0000000f 00000000") + b"_heartbeat_"
ERROR_FRAME = bytes.fromhex("00000021 00000001") + b"E_INVALID invalid command FOO"
MESSAGE = encode_message(0x1122334455667788, 1, b"0a1b2c3d4e5f6071", b"body")
MESSAGE_FRAME = bytes.fromhex("00000022 00000002") + MESSAGE  # 4 + 26 + 4 = 34 = 0x22


def test_frame_type_values():
    assert (FRAME_TYPE_RESPONSE, FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE) == (0, 1, 2)


def test_response_constants():
    assert (OK, HEARTBEAT, CLOSE_WAIT) == (b"OK", b"_heartbeat_", b"CLOSE_WAIT")


def test_ok_response_frame():
    assert encode_response(OK) == OK_FRAME


def test_heartbeat_frame():
    assert encode_response(HEARTBEAT) == HEARTBEAT_FRAME


def test_error_frame():
    assert encode_error(b"E_INVALID invalid command FOO") == ERROR_FRAME


def test_message_frame_size_is_4_plus_26_plus_body():
    frame = encode_frame(FRAME_TYPE_MESSAGE, MESSAGE)
    assert frame == MESSAGE_FRAME
    assert frame[8:16] == bytes.fromhex("1122334455667788")
    assert frame[16:18] == b"\x00\x01"


def test_close_wait_and_empty_frames():
    assert encode_response(CLOSE_WAIT) == bytes.fromhex("0000000e 00000000") + b"CLOSE_WAIT"
    assert encode_response(b"") == bytes.fromhex("00000004 00000000")


STREAM = OK_FRAME + HEARTBEAT_FRAME + MESSAGE_FRAME + encode_response(b"") + ERROR_FRAME
FRAMES = [
    Frame(FRAME_TYPE_RESPONSE, b"OK"),
    Frame(FRAME_TYPE_RESPONSE, b"_heartbeat_"),
    Frame(FRAME_TYPE_MESSAGE, MESSAGE),
    Frame(FRAME_TYPE_RESPONSE, b""),
    Frame(FRAME_TYPE_ERROR, b"E_INVALID invalid command FOO"),
]


def test_reader_takes_every_frame_from_one_buffer():
    reader = FrameReader()
    reader.receive_data(STREAM)
    assert list(reader.frames()) == FRAMES
    assert reader.next_frame() is None


def test_reader_byte_by_byte():
    reader = FrameReader()
    got = []
    for index in range(len(STREAM)):
        reader.receive_data(STREAM[index:index + 1])
        got += reader.frames()
    assert got == FRAMES


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_reader_split_anywhere(cut):
    reader = FrameReader()
    reader.receive_data(STREAM[:cut])
    got = list(reader.frames())
    reader.receive_data(STREAM[cut:])
    got += reader.frames()
    assert got == FRAMES


def test_reader_waits_for_the_whole_header_and_data():
    reader = FrameReader()
    reader.receive_data(OK_FRAME[:7])
    assert reader.next_frame() is None
    reader.receive_data(OK_FRAME[7:9])
    assert reader.next_frame() is None
    reader.receive_data(OK_FRAME[9:])
    assert reader.next_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")


@pytest.mark.parametrize("size", [3, 0, -1, -0x80000000])
def test_reader_refuses_sizes_below_4(size):
    reader = FrameReader()
    reader.receive_data(size.to_bytes(4, "big", signed=True) + b"\x00\x00\x00\x00")
    with pytest.raises(FrameError, match=f"invalid frame size {size}"):
        reader.next_frame()


def test_reader_refuses_sizes_over_its_maximum():
    reader = FrameReader(max_frame_size=10)
    reader.receive_data(encode_response(b"123456"))  # size 10: allowed
    assert reader.next_frame() == Frame(FRAME_TYPE_RESPONSE, b"123456")
    reader.receive_data(bytes.fromhex("0000000b 00000000"))
    with pytest.raises(FrameError, match="invalid frame size 11"):
        reader.next_frame()


def test_reader_returns_bytes_not_views():
    reader = FrameReader()
    reader.receive_data(OK_FRAME)
    frame = reader.next_frame()
    reader.receive_data(HEARTBEAT_FRAME)
    assert type(frame.data) is bytes and frame.data == b"OK"
