"""The V1 lookup protocol between nsqd and nsqlookupd, both sides, sans-IO.

Theory of operation (nsqlookupd/tcp.go, nsqlookupd/lookup_protocol_v1.go, nsqd/lookup_peer.go):

* The peer (an nsqd) sends the 4-byte magic ``"  V1"`` first; anything else is
  answered ``E_BAD_PROTOCOL`` and the connection closed.
* Then one command per line. nsqlookupd reads up to ``\\n``, trims white space at both
  ends (Go's strings.TrimSpace) and splits on single spaces, so ``"REGISTER t  c"``
  has an empty channel and registers the topic only, and an empty line is the invalid
  command ``""``.
* ``PING`` (allowed at any time), ``IDENTIFY`` followed by ``[int32 size][JSON]``,
  ``REGISTER <topic> [<channel>]``, ``UNREGISTER <topic> [<channel>]``. REGISTER and
  UNREGISTER need a prior IDENTIFY; a second IDENTIFY is refused before its body is
  read. The parser tracks that itself, since nothing after parsing can refuse an
  IDENTIFY.
* Every reply, success or error, is ``[int32 size][data]``; errors are
  ``"<CODE> <description>"`` and every one of them is fatal: the reply is sent, then
  the connection closed.

Bounds NSQ does not have: a command line is at most :data:`MAX_LINE_LENGTH` bytes and an
IDENTIFY body at most ``max_body_size`` bytes, both refused before they are buffered;
a negative IDENTIFY size (which makes Go's nsqlookupd panic) is an E_BAD_BODY error.
"""

import struct
from typing import Any, NamedTuple

from . import gojson
from .errors import ClientError
from .names import is_valid_name
from .receive_buffer import ReceiveBuffer

MAGIC_V1 = b"  V1"
MAX_LINE_LENGTH = 16 * 1024  # newline included, as nsqd's V2 parser
DEFAULT_MAX_BODY_SIZE = 1024 * 1024
OK = b"OK"

_SIZE = struct.Struct(">i")
# Go's unicode.IsSpace, which strings.TrimSpace trims (Python's str.strip() also trims \x1c-\x1f).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000"

# nsqlookupd's PeerInfo: the IDENTIFY fields it keeps, in its JSON order.
PEER_INFO_FIELDS: dict[str, type] = {
    "remote_address": str,
    "hostname": str,
    "broadcast_address": str,
    "tcp_port": int,
    "http_port": int,
    "version": str,
}
_ZERO = {str: "", int: 0}


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()


# -- commands (events on the server side, encoders on the client side) --------------------


class Ping(NamedTuple):
    def to_bytes(self) -> bytes:
        return b"PING\n"


class Identify(NamedTuple):
    """Client side: any JSON-able dict. Server side: PEER_INFO_FIELDS, typed, zero when absent."""

    data: dict[str, Any]

    def to_bytes(self) -> bytes:
        body = gojson.dumps(self.data, sort_keys=True)  # nsqd marshals a map: keys sorted
        return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body


class Register(NamedTuple):
    topic: str
    channel: str = ""  # "" registers the topic alone

    def to_bytes(self) -> bytes:
        return _topic_channel_line("REGISTER", self.topic, self.channel)


class Unregister(NamedTuple):
    topic: str
    channel: str = ""

    def to_bytes(self) -> bytes:
        return _topic_channel_line("UNREGISTER", self.topic, self.channel)


Command = Ping | Identify | Register | Unregister


def _topic_channel_line(name: str, topic: str, channel: str) -> bytes:
    line = f"{name} {topic} {channel}\n" if channel else f"{name} {topic}\n"
    return line.encode("utf-8", "surrogateescape")


# -- replies ---------------------------------------------------------------------------------


def encode_response(data: bytes) -> bytes:
    """``[int32 size][data]``: every nsqlookupd reply, errors included."""
    return _SIZE.pack(len(data)) + data


def encode_error(err: ClientError) -> bytes:
    return encode_response(err.to_bytes())


def is_error(response: bytes) -> bool:
    """An error reply (``E_INVALID ...``, ``E_BAD_TOPIC ...``) rather than OK or JSON."""
    return response.startswith(b"E_")


class ResponseError(Exception):
    """nsqlookupd sent a reply that cannot be valid or is over the reader's limit."""


class ResponseReader(ReceiveBuffer):
    """Client side: feed bytes from nsqlookupd, take whole replies out.

    A size over ``max_size`` is refused before the reply is buffered, as nsqd's
    readResponseBounded does (nsqd bounds it by its --max-body-size).
    """

    def __init__(self, max_size: int = 5 * 1024 * 1024):
        super().__init__()
        self._max = max_size

    def next_response(self) -> bytes | None:
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        size = _SIZE.unpack_from(buf, pos)[0]
        if size > self._max:
            raise ResponseError(f"response body size ({size}) is greater than limit ({self._max})")
        if size < 0:
            raise ResponseError(f"invalid response body size ({size})")
        end = pos + 4 + size
        if len(buf) < end:
            return None
        self._pos = end
        return bytes(buf[pos + 4 : end])


# -- server side -------------------------------------------------------------------------------


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _invalid(description: str) -> ClientError:
    return ClientError("E_INVALID", description)


def decode_peer_info(body: bytes) -> dict[str, Any]:
    """An IDENTIFY body as nsqlookupd's PeerInfo: every field, typed; Go's checks and errors."""
    try:
        given = gojson.decode_struct(body, PEER_INFO_FIELDS)
    except ValueError as exc:
        raise ClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from exc
    info = {name: given.get(name, _ZERO[kind]) for name, kind in PEER_INFO_FIELDS.items()}
    if not info["broadcast_address"] or not info["tcp_port"] or not info["http_port"] or not info["version"]:
        raise ClientError("E_BAD_BODY", "IDENTIFY missing fields")
    return info


class ServerParser(ReceiveBuffer):
    """nsqlookupd's side of one connection: bytes in, :data:`Command` events out.

    Raises :class:`ClientError` (always fatal) with NSQ's code and text on bad input.
    """

    def __init__(self, max_body_size: int = DEFAULT_MAX_BODY_SIZE, expect_magic: bool = True):
        super().__init__()
        self.max_body_size = max_body_size
        self.identified = False
        self._magic_pending = expect_magic
        self._body_start = -1  # >= 0 while an IDENTIFY line has been read but not its body

    def _drop_parsed(self) -> None:
        if self._body_start >= 0:
            self._body_start -= self._pos
        super()._drop_parsed()

    def receive_eof(self) -> ClientError | None:
        """The peer closed its side: the error nsqlookupd would still reply, if any.

        Go only answers when the stream ends inside an IDENTIFY body; a partial magic
        or a partial command line just ends the connection.
        """
        if self._body_start < 0:
            return None
        if len(self._buf) - self._body_start < 4:
            return ClientError("E_BAD_BODY", "IDENTIFY failed to read body size")
        return ClientError("E_BAD_BODY", "IDENTIFY failed to read body")

    def next_event(self):
        """The next whole command, or NEED_DATA."""
        buf = self._buf
        if self._magic_pending:
            if len(buf) - self._pos < 4:
                return NEED_DATA
            if buf[self._pos : self._pos + 4] != MAGIC_V1:
                raise ClientError("E_BAD_PROTOCOL")
            self._magic_pending = False
            self._pos += 4
        if self._body_start >= 0:
            return self._identify_body()
        pos = self._pos
        newline = buf.find(b"\n", pos, pos + MAX_LINE_LENGTH)
        if newline < 0:
            if len(buf) - pos >= MAX_LINE_LENGTH:
                raise _invalid(f"command line longer than {MAX_LINE_LENGTH} bytes")
            return NEED_DATA
        line = _text(bytes(buf[pos:newline])).strip(_GO_SPACE)
        self._pos = newline + 1
        params = line.split(" ")
        name = params[0]
        if name == "PING":
            return Ping()
        if name == "IDENTIFY":
            if self.identified:
                raise _invalid("cannot IDENTIFY again")
            self._body_start = self._pos
            return self._identify_body()
        if name == "REGISTER":
            return Register(*self._topic_channel(name, params))
        if name == "UNREGISTER":
            return Unregister(*self._topic_channel(name, params))
        raise _invalid(f"invalid command {name}")

    def _identify_body(self):
        buf, start = self._buf, self._body_start
        if len(buf) - start < 4:
            return NEED_DATA
        size = _SIZE.unpack_from(buf, start)[0]
        if size < 0:
            raise ClientError("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
        if size > self.max_body_size:
            raise ClientError("E_BAD_BODY", f"IDENTIFY body too big {size} > {self.max_body_size}")
        end = start + 4 + size
        if len(buf) < end:
            return NEED_DATA
        body = bytes(buf[start + 4 : end])
        self._pos = end
        self._body_start = -1
        info = decode_peer_info(body)
        self.identified = True
        return Identify(info)

    def _topic_channel(self, command: str, params: list[str]) -> tuple[str, str]:
        """lookup_protocol_v1.go getTopicChan, after the IDENTIFY check REGISTER makes first."""
        if not self.identified:
            raise _invalid("client must IDENTIFY")
        if len(params) < 2:
            raise _invalid(f"{command} insufficient number of params")
        topic = params[1]
        channel = params[2] if len(params) > 2 else ""
        if not is_valid_name(topic):
            raise ClientError("E_BAD_TOPIC", f"{command} topic name '{topic}' is not valid")
        if channel and not is_valid_name(channel):
            raise ClientError("E_BAD_CHANNEL", f"{command} channel name '{channel}' is not valid")
        return topic, channel
