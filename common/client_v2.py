"""A client's side of the V2 protocol, sans-IO: nsqd's bytes in, frames out.

Theory of operation (go-nsq conn.go, nsqd/protocol_v2.go):

* nsqd answers in frames ``[size:int32][frame_type:int32][data]``. A client parses every
  whole frame a read brought in one go (:meth:`FrameParser.frames`), which is what lets it
  keep up with a stream of message frames.
* During the handshake a client reads one frame at a time (:meth:`FrameParser.next_frame`):
  right after IDENTIFY's answer the stream may change layer (TLS, snappy, deflate), and the
  bytes behind that answer belong to the new layer, so the client takes them back with
  :meth:`FrameParser.take_buffered` and feeds them through the new decoder.
* Error frames carry ``"<code> <description>"``; only E_FIN_FAILED, E_REQ_FAILED and
  E_TOUCH_FAILED leave the connection open.
* Topic and channel names are checked before a command is written: a name with a space or a
  newline would otherwise split into other parameters or other commands.
"""

import struct

from .frames import FRAME_HEAD, FrameError
from .goquote import go_quote
from .names import is_valid_name

NON_FATAL_ERRORS = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})
MAX_FRAME_SIZE = 64 * 1024 * 1024
_SIZE = struct.Struct(">i")


class FrameParser:
    """Incremental parser of nsqd's frames; a large frame is joined once, when whole."""

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE):
        self._max = max_frame_size
        self._buf = b""
        self._pending: list[bytes] = []
        self._avail = 0
        self._need = 0

    def receive_data(self, data: bytes) -> None:
        if self._need and self._avail + len(data) < self._need:
            self._pending.append(data)
            self._avail += len(data)
            return
        if self._pending:
            data = b"".join([self._buf, *self._pending, data])
            self._pending.clear()
        elif self._buf:
            data = self._buf + data
        self._buf = data
        self._avail = len(data)
        self._need = 0

    def _frame_end(self, buf: bytes, pos: int) -> int:
        """Where the frame at ``pos`` ends, or 0 when it is not whole yet."""
        if len(buf) - pos < 8:
            return 0
        size = _SIZE.unpack_from(buf, pos)[0]
        if size < 4 or size > self._max:
            raise FrameError(f"invalid frame size {size}")
        end = pos + 4 + size
        if end > len(buf):
            self._need = end - pos
            return 0
        return end

    def next_frame(self) -> tuple[int, bytes] | None:
        """The next whole frame as ``(frame_type, data)``, or None."""
        if self._need:
            return None
        buf = self._buf
        end = self._frame_end(buf, 0)
        if not end:
            return None
        frame_type = FRAME_HEAD.unpack_from(buf)[1]
        self._buf = buf[end:]
        self._avail = len(self._buf)
        return frame_type, buf[8:end]

    def frames(self) -> list[tuple[int, bytes]]:
        """Every whole frame received so far, as ``(frame_type, data)`` pairs."""
        if self._need:
            return []
        buf, pos, size = self._buf, 0, len(self._buf)
        unpack, limit = FRAME_HEAD.unpack_from, self._max
        frames = []
        append = frames.append
        while size - pos >= 8:
            length, frame_type = unpack(buf, pos)
            if length < 4 or length > limit:
                raise FrameError(f"invalid frame size {length}")
            end = pos + 4 + length
            if end > size:
                self._need = end - pos
                break
            append((frame_type, buf[pos + 8 : end]))
            pos = end
        if pos:
            self._buf = buf[pos:]
            self._avail = size - pos
        return frames

    def take_buffered(self) -> bytes:
        """Hand back every byte received but not parsed (the stream changes layer)."""
        rest = b"".join([self._buf, *self._pending])
        self._buf, self._avail, self._need = b"", 0, 0
        self._pending.clear()
        return rest


def split_error(data: bytes) -> tuple[str, str]:
    """An error frame's ``(code, description)``."""
    code, _, description = data.decode("utf-8", "replace").partition(" ")
    return code, description


def invalid_topic(command: str, topic: str) -> tuple[str, str] | None:
    """The ``(code, description)`` nsqd would answer for this topic name, or None if valid."""
    if is_valid_name(topic):
        return None
    prefix = "E_BAD_TOPIC " if command == "MPUB" else ""
    return "E_BAD_TOPIC", f"{prefix}{command} topic name {go_quote(topic)} is not valid"


def invalid_channel(channel: str) -> tuple[str, str] | None:
    """The ``(code, description)`` nsqd would answer for this SUB channel name, or None if valid."""
    if is_valid_name(channel):
        return None
    return "E_BAD_CHANNEL", f"SUB channel name {go_quote(channel)} is not valid"


def encode_mpub(topic: str, bodies) -> bytes:
    """An MPUB command: ``MPUB <topic>\\n[size][n]([size][body])*``, in one allocation per part."""
    pack = _SIZE.pack
    parts = [b"", pack(len(bodies))]
    total = 4
    for body in bodies:
        parts.append(pack(len(body)))
        parts.append(body)
        total += 4 + len(body)
    parts[0] = b"MPUB %s\n%s" % (topic.encode(), pack(total))
    return b"".join(parts)
