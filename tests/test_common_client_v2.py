"""The client side of the V2 protocol (common/client_v2.py): frames out of arbitrary slices,
one frame at a time across a layer change, error frames, names checked before sending, MPUB."""

import pytest

from common.client_v2 import FrameParser, encode_mpub, invalid_channel, invalid_topic, split_error
from common.commands import Mpub
from common.frames import FrameError, encode_error, encode_frame, encode_response

MESSAGE = encode_frame(2, b"\x00" * 8 + b"\x00\x01" + b"0123456789abcdef" + b"body")


def test_every_whole_frame_of_a_read_comes_out_in_order():
    parser = FrameParser()
    parser.receive_data(encode_response(b"OK") + MESSAGE + encode_error(b"E_INVALID bad") + MESSAGE[:5])
    assert [frame_type for frame_type, _ in parser.frames()] == [0, 2, 1]
    assert parser.frames() == []
    parser.receive_data(MESSAGE[5:])
    assert parser.frames() == [(2, MESSAGE[8:])]


def test_frames_cut_anywhere_come_out_whole():
    stream = b"".join([encode_response(b"_heartbeat_"), MESSAGE * 3, encode_response(b"CLOSE_WAIT")])
    parser, frames = FrameParser(), []
    for start in range(0, len(stream), 7):
        parser.receive_data(stream[start:start + 7])
        frames += parser.frames()
    assert [data for _, data in frames] == [b"_heartbeat_", MESSAGE[8:], MESSAGE[8:], MESSAGE[8:], b"CLOSE_WAIT"]


def test_a_large_frame_waits_until_whole():
    big = encode_frame(2, b"x" * 1_000_000)
    parser = FrameParser()
    for start in range(0, len(big) - 1, 65536):
        parser.receive_data(big[start:min(start + 65536, len(big) - 1)])
        assert parser.frames() == []
    parser.receive_data(big[-1:])
    assert parser.frames() == [(2, b"x" * 1_000_000)]


def test_one_frame_at_a_time_and_the_rest_handed_back_for_a_new_layer():
    parser = FrameParser()
    parser.receive_data(encode_response(b'{"snappy":true}') + b"\xff\x06\x00\x00sNaPpY")
    assert parser.next_frame() == (0, b'{"snappy":true}')
    assert parser.take_buffered() == b"\xff\x06\x00\x00sNaPpY"
    assert parser.frames() == []


@pytest.mark.parametrize("size", [0, 3, 64 * 1024 * 1024 + 1])
def test_impossible_frame_sizes_are_refused(size):
    parser = FrameParser()
    parser.receive_data(size.to_bytes(4, "big") + b"\x00" * 8)
    with pytest.raises(FrameError):
        parser.frames()


def test_error_frames_split_into_code_and_description():
    assert split_error(b"E_BAD_TOPIC PUB topic name \"a b\" is not valid") == (
        "E_BAD_TOPIC", 'PUB topic name "a b" is not valid')
    assert split_error(b"E_INVALID") == ("E_INVALID", "")


def test_names_are_checked_as_nsqd_would():
    assert invalid_topic("PUB", "events") is None
    assert invalid_topic("PUB", "a b") == ("E_BAD_TOPIC", 'PUB topic name "a b" is not valid')
    assert invalid_topic("MPUB", "x\n") == ("E_BAD_TOPIC", 'E_BAD_TOPIC MPUB topic name "x\\n" is not valid')
    assert invalid_channel("ch#ephemeral") is None
    assert invalid_channel("") == ("E_BAD_CHANNEL", 'SUB channel name "" is not valid')


def test_mpub_encoding_matches_the_command_event():
    bodies = [b"a", b"bb" * 100, bytes(range(256))]
    assert encode_mpub("t", bodies) == Mpub("t", bodies).to_bytes()
