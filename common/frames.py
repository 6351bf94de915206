"""nsqd -> client frames: ``[size:int32][frame_type:int32][data]``, size = 4 + len(data)."""

import struct
from typing import NamedTuple

from .receive_buffer import ReceiveBuffer

FRAME_TYPE_RESPONSE = 0
FRAME_TYPE_ERROR = 1
FRAME_TYPE_MESSAGE = 2

OK = b"OK"
HEARTBEAT = b"_heartbeat_"
CLOSE_WAIT = b"CLOSE_WAIT"

FRAME_HEAD = struct.Struct(">ii")


def encode_frame(frame_type: int, data: bytes) -> bytes:
    return FRAME_HEAD.pack(len(data) + 4, frame_type) + data


def encode_response(data: bytes) -> bytes:
    return encode_frame(FRAME_TYPE_RESPONSE, data)


HEARTBEAT_FRAME = encode_response(HEARTBEAT)


def encode_error(data: bytes) -> bytes:
    return encode_frame(FRAME_TYPE_ERROR, data)


class Frame(NamedTuple):
    frame_type: int
    data: bytes


class FrameError(Exception):
    """The peer sent a frame that cannot be valid."""


class FrameReader(ReceiveBuffer):
    """Client side: feed bytes from nsqd, take whole frames out."""

    def __init__(self, max_frame_size: int = 64 * 1024 * 1024):
        super().__init__()
        self._max = max_frame_size

    def next_frame(self) -> Frame | None:
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 8:
            return None
        size, frame_type = FRAME_HEAD.unpack_from(buf, pos)
        if size < 4 or size > self._max:
            raise FrameError(f"invalid frame size {size}")
        end = pos + 4 + size
        if len(buf) < end:
            return None
        self._pos = end
        return Frame(frame_type, bytes(buf[pos + 8 : end]))

    def take_buffered(self) -> bytes:
        """Hand back every byte received but not taken out as a frame."""
        rest = bytes(self._buf[self._pos :])
        self._buf, self._pos = bytearray(), 0
        return rest

    def frames(self):
        """Yield every complete frame buffered so far."""
        while (frame := self.next_frame()) is not None:
            yield frame

