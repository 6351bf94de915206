"""NSQ message encoding (nsqd/message.go), the same on the wire and on disk.

``[timestamp:int64 ns][attempts:uint16][id:16 ASCII hex bytes][body]``. The first
26 bytes are the *header*; nsqd keeps a queued message as one bytes object in this
encoding (nsqd/message.py), so the ``header_*`` functions read a whole message too.
"""

import struct
from typing import NamedTuple

MSG_ID_LENGTH = 16
HEADER_LENGTH = 8 + 2 + MSG_ID_LENGTH
MIN_MESSAGE_LENGTH = HEADER_LENGTH

TIMESTAMP_ATTEMPTS = struct.Struct(">qH")


class Message(NamedTuple):
    timestamp: int
    attempts: int
    id: bytes
    body: bytes


def encode_header(timestamp: int, attempts: int, msg_id: bytes) -> bytes:
    return TIMESTAMP_ATTEMPTS.pack(timestamp, attempts & 0xFFFF) + msg_id


def encode_message(timestamp: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    return encode_header(timestamp, attempts, msg_id) + body


def header_attempts(header: bytes) -> int:
    return (header[8] << 8) | header[9]


def header_id(header: bytes) -> bytes:
    return header[10:HEADER_LENGTH]


def with_attempts(header: bytes, attempts: int) -> bytes:
    """The header (or whole message) with its attempts replaced."""
    return header[:8] + (attempts & 0xFFFF).to_bytes(2, "big") + header[10:]


def decode_message(data: bytes) -> Message:
    if len(data) < MIN_MESSAGE_LENGTH:
        raise ValueError(f"invalid message buffer size ({len(data)})")
    timestamp, attempts = TIMESTAMP_ATTEMPTS.unpack_from(data)
    return Message(timestamp, attempts, bytes(data[10:HEADER_LENGTH]), bytes(data[HEADER_LENGTH:]))
