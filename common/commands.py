"""The V2 protocol's client commands as events.

nsqd's parser (``common.protocol_v2``) produces them; a client turns them into bytes with
``to_bytes()``. Wire syntax: ``NAME[ param]*\\n``, then ``[int32 size][body]`` for the
commands that carry one.
"""

import json
import struct
from typing import Any, NamedTuple

MAGIC_V2 = b"  V2"
_SIZE = struct.Struct(">i")


def _with_body(line: bytes, body: bytes) -> bytes:
    return b"".join((line, _SIZE.pack(len(body)), body))


class Identify(NamedTuple):
    data: dict[str, Any]

    def to_bytes(self) -> bytes:
        return _with_body(b"IDENTIFY\n", json.dumps(self.data).encode())


class Auth(NamedTuple):
    secret: bytes

    def to_bytes(self) -> bytes:
        return _with_body(b"AUTH\n", self.secret)


class Sub(NamedTuple):
    topic: str
    channel: str

    def to_bytes(self) -> bytes:
        return f"SUB {self.topic} {self.channel}\n".encode()


class Rdy(NamedTuple):
    count: int

    def to_bytes(self) -> bytes:
        return b"RDY %d\n" % self.count


class Fin(NamedTuple):
    id: bytes

    def to_bytes(self) -> bytes:
        return b"FIN " + self.id + b"\n"


class Req(NamedTuple):
    id: bytes
    timeout_ms: int

    def to_bytes(self) -> bytes:
        return b"REQ %s %d\n" % (self.id, self.timeout_ms)


class Touch(NamedTuple):
    id: bytes

    def to_bytes(self) -> bytes:
        return b"TOUCH " + self.id + b"\n"


class Cls(NamedTuple):
    def to_bytes(self) -> bytes:
        return b"CLS\n"


class Nop(NamedTuple):
    def to_bytes(self) -> bytes:
        return b"NOP\n"


class Pub(NamedTuple):
    topic: str
    body: bytes

    def to_bytes(self) -> bytes:
        return _with_body(f"PUB {self.topic}\n".encode(), self.body)


class Mpub(NamedTuple):
    topic: str
    bodies: list[bytes]

    def to_bytes(self) -> bytes:
        parts = [_SIZE.pack(len(self.bodies))]
        for body in self.bodies:
            parts.append(_SIZE.pack(len(body)))
            parts.append(body)
        return _with_body(f"MPUB {self.topic}\n".encode(), b"".join(parts))


class Dpub(NamedTuple):
    topic: str
    defer_ms: int
    body: bytes

    def to_bytes(self) -> bytes:
        return _with_body(f"DPUB {self.topic} {self.defer_ms}\n".encode(), self.body)


Command = Identify | Auth | Sub | Rdy | Fin | Req | Touch | Cls | Nop | Pub | Mpub | Dpub
