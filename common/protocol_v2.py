"""nsqd's side of the V2 TCP protocol, sans-IO: feed bytes, take command events out.

Theory of operation (nsqd/protocol_v2.go):

* The client sends the 4-byte magic ``"  V2"`` first; anything else is E_BAD_PROTOCOL.
* Then one command per line, ``NAME[ SP param]*\\n`` (a trailing ``\\r`` is dropped,
  params split on single spaces). IDENTIFY, AUTH, PUB, MPUB and DPUB are followed by
  ``[int32 size][size bytes]``.
* Every check NSQ makes before it reads a body happens here, in NSQ's order, so a size
  over the limit is refused before a byte of the body is buffered.
* Which commands a connection may send depends on its state (init, subscribed,
  closing). The server moves ``parser.state`` forward after SUB and CLS succeed.
* With TLS required, IDENTIFY is the only command known until the server calls
  ``tls_established()``; any other is refused before its body is read, as
  nsqd's enforceTLSPolicy does.
* Errors are raised as :class:`ClientError`; only nsqd's three *_FAILED codes are
  non-fatal, and those come from the server, never from the parser.
* With ``fin_runs`` (nsqd's choice), consecutive plain ``FIN <16-byte id>\\n`` lines come
  out as one :class:`FinRun` event, which the server finishes as a batch; any other
  form of FIN (``\\r\\n``, extra parameters, a bad ID) is a :class:`Fin` as always, so
  the same bytes give the same answers.
* With ``mpub_topics`` (nsqd's choice), an MPUB whose topic name is valid first comes out as
  an :class:`MpubTopic` event, as soon as its line is read: NSQ's MPUB gets (creates) the topic
  before it reads the body, so the topic exists even when the body turns out bad or never comes.
"""

import functools
import re
import struct
from enum import IntEnum
from typing import NamedTuple

from .commands import MAGIC_V2, Auth, Cls, Dpub, Fin, Identify, Mpub, Nop, Pub, Rdy, Req, Sub, Touch
from .errors import ClientError
from .goquote import go_quote
from .identify import decode_identify
from .message import MSG_ID_LENGTH
from .names import is_valid_name

MAX_LINE_LENGTH = 16 * 1024  # newline included: nsqd reads lines through a 16 KiB bufio.Reader
_SIZE = struct.Struct(">i")
_SAME_SIZE_CHUNK = 256  # messages a cached struct reads (bounds each one's size: ~8 KiB of codes)
_FIN_RUN = re.compile(rb"(?:FIN [^ \r\n]{16}\n)+")
_FIN_LINE = 21
_UINT64 = 1 << 64
_NS_PER_MS = 1_000_000


class State(IntEnum):
    """Client states as nsqd reports them in /stats."""

    INIT = 0
    DISCONNECTED = 1
    CONNECTED = 2
    SUBSCRIBED = 3
    CLOSING = 4


# A command's body cut off by the end of the connection: its error code, and what nsqd failed to read.
_BODY_READ_ERRORS = {
    "IDENTIFY": ("E_BAD_BODY", "body"),
    "AUTH": ("E_BAD_BODY", "body"),
    "MPUB": ("E_BAD_BODY", "body"),
    "PUB": ("E_BAD_MESSAGE", "message body"),
    "DPUB": ("E_BAD_MESSAGE", "message body"),
}


class Limits(NamedTuple):
    max_body_size: int = 5 * 1024 * 1024
    max_msg_size: int = 1024 * 1024
    max_rdy_count: int = 2500
    max_req_timeout_ms: int = 60 * 60 * 1000


class FinRun(NamedTuple):
    """Consecutive FIN commands, in order (the parser's ``fin_runs`` mode)."""

    ids: list[bytes]


class MpubTopic(NamedTuple):
    """The topic of an MPUB whose body is still to be read (the parser's ``mpub_topics`` mode)."""

    topic: str


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()

_ANY = frozenset(State)
_INIT = frozenset({State.INIT})
_SUBSCRIBED = frozenset({State.SUBSCRIBED})
_IN_FLIGHT_OPS = frozenset({State.SUBSCRIBED, State.CLOSING})


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _base10(raw: bytes) -> int | None:
    """NSQ's ByteToBase10: ASCII digits only (no sign), empty means 0, a Go uint64 (so a number
    past 2**64 - 1 wraps around)."""
    if not raw:
        return 0
    return int(raw) % _UINT64 if raw.isdigit() and raw.isascii() else None


def _int64(value: int) -> int:
    """Go's int64 of a uint64, or of an int64 product that overflowed: the low 64 bits, signed."""
    value %= _UINT64
    return value - _UINT64 if value >= _UINT64 // 2 else value


def _duration_ms(ms: int) -> float:
    """Go's ``time.Duration(ms) * time.Millisecond`` (int64 nanoseconds, wrapping), in ms."""
    ns = _int64(ms * _NS_PER_MS)
    return ns // _NS_PER_MS if ns % _NS_PER_MS == 0 else ns / _NS_PER_MS


_NOP_LINE = b"NOP\n"


def _invalid(description: str) -> ClientError:
    return ClientError("E_INVALID", description)


class CommandParser:
    """Incremental, bounded parser of one client connection's byte stream."""

    def __init__(self, limits: Limits = Limits(), expect_magic: bool = True, tls_required: bool = False,
                 fin_runs: bool = False, mpub_topics: bool = False):
        self.limits = limits
        self.fin_runs = fin_runs
        self.mpub_topics = mpub_topics
        self.heartbeats = True  # the server sets it False when IDENTIFY turns them off: SUB is then refused
        self._topic_announced = False  # the MpubTopic of the command being parsed is out
        self.state = State.INIT
        self.tls_required = tls_required
        self._magic_pending = expect_magic
        self._buf = b""
        self._pos = 0
        self._pending: list[bytes] = []
        self._avail = 0
        self._need = 0
        self._commands = {
            b"IDENTIFY": (_INIT, self._identify),
            b"AUTH": (_INIT, self._auth),
            b"SUB": (_INIT, self._sub),
            b"RDY": (_SUBSCRIBED, self._rdy),
            b"FIN": (_IN_FLIGHT_OPS, self._fin),
            b"REQ": (_IN_FLIGHT_OPS, self._req),
            b"TOUCH": (_IN_FLIGHT_OPS, self._touch),
            b"CLS": (_SUBSCRIBED, self._cls),
            b"NOP": (_ANY, self._nop),
            b"PUB": (_ANY, self._pub),
            b"MPUB": (_ANY, self._mpub),
            b"DPUB": (_ANY, self._dpub),
        }
        self._all_commands = self._commands
        if tls_required:
            self._commands = {b"IDENTIFY": self._all_commands[b"IDENTIFY"]}

    def tls_established(self) -> None:
        self.tls_required = False
        self._commands = self._all_commands

    @property
    def buffered(self) -> int:
        """Bytes received but not yet turned into events."""
        return self._avail

    def receive_data(self, data: bytes) -> None:
        if not self._avail:  # all that came before is parsed: the usual read, one or more commands
            self._buf, self._pos, self._avail, self._need = data, 0, len(data), 0
            return
        if self._need and self._avail + len(data) < self._need:
            self._pending.append(data)
            self._avail += len(data)
            return
        rest = self._buf[self._pos :] if self._pos < len(self._buf) else b""
        if self._pending:
            data = b"".join([rest, *self._pending, data])
            self._pending.clear()
        elif rest:
            data = rest + data
        self._buf = data
        self._pos = 0
        self._avail = len(data)
        self._need = 0

    def take_lone_nop(self, data: bytes) -> bool:
        """Take a read that is one NOP and nothing more, arriving with nothing buffered, as
        ``receive_data`` and ``next_event`` would (a NOP is allowed in every state, except before
        the magic and while TLS is required): True if it was, and there is no event to execute,
        as a NOP does nothing; else False, and nothing was taken. A consumer's answer to a
        heartbeat is most of what an idle server reads."""
        if data != _NOP_LINE or self._avail or self._magic_pending or self._commands is not self._all_commands:
            return False
        self._topic_announced = False
        return True

    def take_buffered(self) -> bytes:
        """Hand back every byte received but not parsed (the connection changes layers)."""
        rest = b"".join([self._buf[self._pos :], *self._pending])
        self.discard_buffered()
        return rest

    def discard_buffered(self) -> None:
        """Drop every byte received but not parsed (the connection has ended)."""
        self._buf, self._pos, self._avail, self._need = b"", 0, 0, 0
        self._pending.clear()

    def receive_eof(self) -> ClientError | None:
        """What nsqd answers when the client's side of the connection ends in the middle of a
        command: it reads a body's size and the body with io.ReadFull, and says so when that
        fails. Nothing buffered, or a line without its newline, ends in silence (None)."""
        if self._magic_pending:
            return None
        buf = b"".join([self._buf[self._pos :], *self._pending])
        newline = buf.find(b"\n")
        if newline < 0:
            return None
        end = newline - 1 if newline > 0 and buf[newline - 1] == 13 else newline
        name = buf[:end].split(b" ")[0].decode("ascii", "replace")
        body_start = newline + 1
        if name == "MPUB" and len(buf) >= body_start + 4:
            try:  # nsqd reads the messages from the connection, whatever size the body said
                mpub_bodies(buf, body_start + 4, len(buf), self.limits.max_body_size, self.limits.max_msg_size,
                            exact=False)
            except ClientError as err:
                return err
            return None
        if name not in _BODY_READ_ERRORS:
            return None
        code, what = _BODY_READ_ERRORS[name]
        if len(buf) < body_start + 4:
            return ClientError(code, f"{name} failed to read {what} size")
        return ClientError(code, f"{name} failed to read {what}")

    def next_event(self):
        """The next whole command, or NEED_DATA. Raises ClientError on bad input."""
        if self._need or not self._avail:
            return NEED_DATA
        if self._magic_pending:
            if self._avail < 4:
                return self._wait(4)
            if self._buf[self._pos : self._pos + 4] != MAGIC_V2:
                raise ClientError("E_BAD_PROTOCOL")
            self._magic_pending = False
            self._consume(self._pos + 4)
        while True:
            buf, pos = self._buf, self._pos
            if self.fin_runs and buf.startswith(b"FIN ", pos) and self.state in _IN_FLIGHT_OPS:
                run = _FIN_RUN.match(buf, pos)
                if run is not None:
                    end = run.end()
                    self._consume(end)
                    return FinRun([buf[start : start + MSG_ID_LENGTH] for start in range(pos + 4, end, _FIN_LINE)])
            newline = buf.find(b"\n", pos, pos + MAX_LINE_LENGTH)
            if newline < 0:
                if len(buf) - pos >= MAX_LINE_LENGTH:
                    raise _invalid(f"command line longer than {MAX_LINE_LENGTH} bytes")
                return NEED_DATA
            end = newline - 1 if newline > pos and buf[newline - 1] == 13 else newline
            params = buf[pos:end].split(b" ")
            entry = self._commands.get(params[0])
            if entry is None:
                if self.tls_required:
                    raise _invalid(f"cannot {_text(params[0])} in current state (TLS required)")
                raise _invalid(f"invalid command {_text(params[0])}")
            allowed, parse = entry
            if self.state in allowed:
                return parse(params, newline + 1)
            if params[0] != b"RDY" or self.state != State.CLOSING:
                raise _invalid(f"cannot {_text(params[0])} in current state")
            self._consume(newline + 1)  # RDY after CLS is ignored, as in nsqd

    def _consume(self, new_pos: int) -> None:
        self._topic_announced = False
        self._avail -= new_pos - self._pos
        self._pos = new_pos

    def _wait(self, total_from_pos: int):
        self._need = total_from_pos
        return NEED_DATA

    def _body(self, body_start: int, command: str, code: str, max_size: int):
        """The size-prefixed body after a command line, NSQ's checks in NSQ's order."""
        buf = self._buf
        if len(buf) < body_start + 4:
            return self._wait(body_start + 4 - self._pos)
        size = _SIZE.unpack_from(buf, body_start)[0]
        if code == "E_BAD_MESSAGE":
            if size <= 0:
                raise ClientError(code, f"{command} invalid message body size {size}")
            if size > max_size:
                raise ClientError(code, f"{command} message too big {size} > {max_size}")
        else:
            if size > max_size:
                raise ClientError(code, f"{command} body too big {size} > {max_size}")
            if size <= 0:
                raise ClientError(code, f"{command} invalid body size {size}")
        end = body_start + 4 + size
        if len(buf) < end:
            return self._wait(end - self._pos)
        body = buf[body_start + 4 : end]
        self._consume(end)
        return body

    def _topic(self, params: list[bytes], command: str, code_prefix: str = "") -> str:
        topic = _text(params[1])
        if not is_valid_name(topic):
            raise ClientError("E_BAD_TOPIC", f"{code_prefix}{command} topic name {go_quote(params[1])} is not valid")
        return topic

    def _identify(self, params, body_start):
        body = self._body(body_start, "IDENTIFY", "E_BAD_BODY", self.limits.max_body_size)
        if body is NEED_DATA:
            return body
        return Identify(decode_identify(body))

    def _auth(self, params, body_start):
        if len(params) != 1:
            raise _invalid("AUTH invalid number of parameters")
        body = self._body(body_start, "AUTH", "E_BAD_BODY", self.limits.max_body_size)
        if body is NEED_DATA:
            return body
        return Auth(body)

    def _sub(self, params, body_start):
        if not self.heartbeats:  # nsqd checks this before SUB's parameters
            raise _invalid("cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise _invalid("SUB insufficient number of parameters")
        topic = self._topic(params, "SUB")
        channel = _text(params[2])
        if not is_valid_name(channel):
            raise ClientError("E_BAD_CHANNEL", f"SUB channel name {go_quote(params[2])} is not valid")
        self._consume(body_start)
        return Sub(topic, channel)

    def _rdy(self, params, body_start):
        count = 1
        if len(params) > 1:
            count = _base10(params[1])
            if count is None:
                raise _invalid(f"RDY could not parse count {_text(params[1])}")
            count = _int64(count)
        if not 0 <= count <= self.limits.max_rdy_count:
            raise _invalid(f"RDY count {count} out of range 0-{self.limits.max_rdy_count}")
        self._consume(body_start)
        return Rdy(count)

    def _message_id(self, params, command: str) -> bytes:
        if len(params) < 2:
            raise _invalid(f"{command} insufficient number of params")
        msg_id = params[1]
        if len(msg_id) != MSG_ID_LENGTH:
            raise _invalid("invalid message ID")
        return msg_id

    def _fin(self, params, body_start):
        msg_id = self._message_id(params, "FIN")
        self._consume(body_start)
        return Fin(msg_id)

    def _touch(self, params, body_start):
        msg_id = self._message_id(params, "TOUCH")
        self._consume(body_start)
        return Touch(msg_id)

    def _req(self, params, body_start):
        if len(params) < 3:
            raise _invalid("REQ insufficient number of params")
        msg_id = self._message_id(params, "REQ")
        timeout = _base10(params[2])
        if timeout is None:
            raise _invalid(f"REQ could not parse timeout {_text(params[2])}")
        self._consume(body_start)
        # nsqd clamps (and logs) a timeout out of range, a negative one (wrapped) to 0
        return Req(msg_id, min(max(_duration_ms(timeout), 0), self.limits.max_req_timeout_ms))

    def _cls(self, params, body_start):
        self._consume(body_start)
        return Cls()

    def _nop(self, params, body_start):
        self._consume(body_start)
        return Nop()

    def _pub(self, params, body_start):
        if len(params) < 2:
            raise _invalid("PUB insufficient number of parameters")
        topic = self._topic(params, "PUB")
        body = self._body(body_start, "PUB", "E_BAD_MESSAGE", self.limits.max_msg_size)
        if body is NEED_DATA:
            return body
        return Pub(topic, body)

    def _dpub(self, params, body_start):
        if len(params) < 3:
            raise _invalid("DPUB insufficient number of parameters")
        topic = self._topic(params, "DPUB")
        defer_ms = _base10(params[2])
        if defer_ms is None:
            raise _invalid(f"DPUB could not parse timeout {_text(params[2])}")
        delay_ms = _duration_ms(defer_ms)
        if not 0 <= delay_ms <= self.limits.max_req_timeout_ms:
            raise _invalid(f"DPUB timeout {defer_ms} out of range 0-{self.limits.max_req_timeout_ms}")
        body = self._body(body_start, "DPUB", "E_BAD_MESSAGE", self.limits.max_msg_size)
        if body is NEED_DATA:
            return body
        return Dpub(topic, delay_ms, body)

    def _mpub(self, params, body_start):
        if len(params) < 2:
            raise _invalid("MPUB insufficient number of parameters")
        topic = self._topic(params, "MPUB", code_prefix="E_BAD_TOPIC ")
        if self.mpub_topics and not self._topic_announced:
            self._topic_announced = True
            return MpubTopic(topic)
        buf = self._buf
        if len(buf) < body_start + 4:
            return self._wait(body_start + 4 - self._pos)
        size = _SIZE.unpack_from(buf, body_start)[0]
        if size <= 0:
            raise ClientError("E_BAD_BODY", f"MPUB invalid body size {size}")
        if size > self.limits.max_body_size:
            raise ClientError("E_BAD_BODY", f"MPUB body too big {size} > {self.limits.max_body_size}")
        start = body_start + 4
        end = start + size
        if len(buf) < end:
            return self._wait(end - self._pos)
        bodies = mpub_bodies(buf, start, end, self.limits.max_body_size, self.limits.max_msg_size)
        self._consume(end)
        return Mpub(topic, bodies)


def mpub_bodies(buf: bytes, start: int, end: int, max_body_size: int, max_msg_size: int,
                exact: bool = True) -> list[bytes]:
    """The messages of an MPUB body ``buf[start:end]``: ``[int32 n]`` then n x ``[int32 size][bytes]``;
    with ``exact``, bytes left after the n messages are an error."""
    if end - start < 4:
        raise ClientError("E_BAD_BODY", "MPUB failed to read message count")
    count = _SIZE.unpack_from(buf, start)[0]
    if count <= 0 or count > (max_body_size - 4) // 5:
        raise ClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
    same_size = _same_size_bodies(buf, start + 4, end, count, max_msg_size)
    if same_size is not None:
        return same_size
    quick = _well_formed_bodies(buf, start + 4, end, count, max_msg_size)
    if quick is not None and (not exact or quick[1] == end):
        return quick[0]
    unpack = _SIZE.unpack_from
    bodies = []
    pos = start + 4
    for index in range(count):
        if end - pos < 4:
            raise ClientError("E_BAD_MESSAGE", f"MPUB failed to read message({index}) body size")
        size = unpack(buf, pos)[0]
        if size <= 0:
            raise ClientError("E_BAD_MESSAGE", f"MPUB invalid message({index}) body size {size}")
        if size > max_msg_size:
            raise ClientError("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg_size}")
        pos += 4
        if end - pos < size:
            raise ClientError("E_BAD_MESSAGE", "MPUB failed to read message body")
        bodies.append(buf[pos : pos + size])
        pos += size
    if exact and pos != end:
        # nsqd would parse these leftover bytes as the next command; refuse instead.
        raise ClientError("E_BAD_BODY", f"MPUB body size {end - start} does not match its {count} messages ({pos - start} bytes)")
    return bodies


def _same_size_bodies(buf: bytes, pos: int, end: int, count: int, max_msg_size: int) -> list[bytes] | None:
    """The ``count`` bodies from ``pos`` if they all have the first one's size and fill the bytes
    to ``end`` exactly (a producer's batch of like messages, as NSQ's bench_writer sends); else
    None. No Python step per message: the sizes are compared a byte column at a time (every
    size's first byte is one strided slice, and so on), and the bodies are one struct unpack
    per chunk of messages, a third of what ``_well_formed_bodies`` costs."""
    if end - pos < 4:
        return None
    first = buf[pos : pos + 4]
    (size,) = _SIZE.unpack(first)
    stride = 4 + size
    if not 0 < size <= max_msg_size or end - pos != count * stride:
        return None
    for column in range(4):
        if buf[pos + column : end : stride] != first[column : column + 1] * count:
            return None
    bodies: list[bytes] = []
    while count:
        chunk = min(count, _SAME_SIZE_CHUNK)
        bodies += _same_size_struct(chunk, size).unpack_from(buf, pos)
        pos += chunk * stride
        count -= chunk
    return bodies


@functools.lru_cache(maxsize=32)
def _same_size_struct(count: int, size: int) -> struct.Struct:
    """Reads ``count`` messages of ``size`` bytes: each size skipped (checked), each body taken."""
    return struct.Struct(f"4x{size}s" * count)


def _well_formed_bodies(buf: bytes, pos: int, end: int, count: int,
                        max_msg_size: int) -> tuple[list[bytes], int] | None:
    """The ``count`` bodies from ``pos`` and where they end, if each one is well-formed; else
    None, and ``mpub_bodies`` goes through them again to say which is not, in NSQ's words. One
    test of a body's size where that takes four: what every MPUB's every message pays."""
    bodies = []
    append, unpack = bodies.append, _SIZE.unpack_from
    try:
        for _ in range(count):
            (size,) = unpack(buf, pos)
            pos += 4
            body_end = pos + size
            if not 0 < size <= max_msg_size or body_end > end:
                return None
            append(buf[pos:body_end])
            pos = body_end
    except struct.error:  # the size itself is past the bytes received
        return None
    return bodies, pos


def parse_mpub_body(body: bytes, max_body_size: int, max_msg_size: int) -> list[bytes]:
    """An MPUB body on its own (HTTP ``/mpub?binary=true``): bytes after the messages are
    ignored, as nsqd reads the messages from the request body and leaves the rest unread."""
    return mpub_bodies(body, 0, len(body), max_body_size, max_msg_size, exact=False)
