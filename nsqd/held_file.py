"""The files --persist-deferred keeps beside a queue's go-diskqueue files (nsqd/deferred_store.py).

``<queue>.deferred.dat`` holds a channel's deferred messages with their due time, or the
deferred messages a topic holds until it has a channel, with their delay;
``<queue>.inflight.dat`` a channel's messages in flight and how far its disk queue was read
(with --mem-queue-size=0), or how far a topic's disk queue was handed to its channels. NSQ's
nsqd opens its files by name and never lists the directory, so it ignores these, and no
go-diskqueue file can bear such a name (theirs end in ``.diskqueue.<6 digits>.dat`` or
``.diskqueue.meta.dat``).

Format: MAGIC, then records ``[kind:1][value:int64 BE][size:int32 BE][data:size]``, kinds:

* ``D``: data = a message (NSQ's encoding: timestamp, attempts, ID, body); value = when it
  is due, ns since the epoch;
* ``H``: data = a message; value = its delay in ns, not started yet (a topic's);
* ``F``: data = a message; value = the deliveries it has had (in flight);
* ``X``: data = a message ID: its earlier record no longer holds;
* ``P``: data = a disk queue's read position, file number and byte offset (int64 BE each):
  every record before it was read and handed on (value 0).

The last record of an ID wins, and the last ``P``. Appends are written with write(2) (no fsync: a process crash
loses nothing written, as with the disk queues), whole files replaced atomically (temp file,
rename). Like go-diskqueue's records, these carry no checksum (a CRC of each message cost a
fifth of a delivery's CPU here): on reading, a record cut short (the process died in a
write) ends the file, and so does a malformed one (an unknown kind, a size or ID that
cannot be), with a warning.
"""

import errno
import logging
import os
import re
import struct
from typing import NamedTuple

from common.message import HEADER_LENGTH, MIN_MESSAGE_LENGTH, MSG_ID_LENGTH

from .diskqueue import write_atomically

log = logging.getLogger("nsqd")

MAGIC = b"NSQPYHD1"
RECORD = struct.Struct(">cqi")
POSITION_DATA = struct.Struct(">qq")
DEFERRED, HELD, IN_FLIGHT, GONE, POSITION = b"D", b"H", b"F", b"X", b"P"
_MESSAGE_KINDS = (DEFERRED, HELD, IN_FLIGHT)
_KINDS = (*_MESSAGE_KINDS, GONE, POSITION)
_HEX = re.compile(rb"[0-9a-f]+")  # nsqd's message IDs


def record(kind: bytes, value: int, data: bytes) -> bytes:
    return RECORD.pack(kind, value, len(data)) + data


def gone(msg_id: bytes) -> bytes:
    return record(GONE, 0, msg_id)


def position(read_position: tuple[int, int]) -> bytes:
    return record(POSITION, 0, POSITION_DATA.pack(*read_position))


class Contents(NamedTuple):
    """What a file says: ID -> (kind, value, message) of every message whose last record is
    not ``X``, in the order of their last records; the IDs whose last record is ``X``; the
    last read position, if any."""

    messages: dict[bytes, tuple[bytes, int, bytes]]
    gone: frozenset = frozenset()
    position: tuple[int, int] | None = None


def parse(data: bytes, name: str) -> Contents:
    if not data.startswith(MAGIC):
        if data:
            log.warning("%s: not a --persist-deferred file, ignored", name)
        return Contents({})
    live: dict[bytes, tuple[bytes, int, bytes]] = {}
    gone: set[bytes] = set()
    read_position = None
    pos = len(MAGIC)
    while pos + RECORD.size <= len(data):
        kind, value, size = RECORD.unpack_from(data, pos)
        start = pos + RECORD.size
        payload = data[start:start + size]
        if kind in _KINDS and 0 <= size and len(payload) < size:
            break  # cut short by a crash
        if not _well_formed(kind, payload):
            log.warning("%s: bad record at byte %d, ignoring the rest of the file", name, pos)
            break
        pos = start + size
        if kind == POSITION:
            read_position = POSITION_DATA.unpack(payload)
            continue
        msg_id = payload[10:HEADER_LENGTH] if kind in _MESSAGE_KINDS else payload
        live.pop(msg_id, None)
        if kind == GONE:
            gone.add(msg_id)
        else:
            gone.discard(msg_id)
            live[msg_id] = (kind, value, payload)
    return Contents(live, frozenset(gone), read_position)


def _well_formed(kind: bytes, payload: bytes) -> bool:
    if kind == POSITION:
        return len(payload) == POSITION_DATA.size and min(POSITION_DATA.unpack(payload)) >= 0
    if kind == GONE:
        msg_id = payload
    elif kind in _MESSAGE_KINDS and len(payload) >= MIN_MESSAGE_LENGTH:
        msg_id = payload[10:HEADER_LENGTH]
    else:
        return False
    return len(msg_id) == MSG_ID_LENGTH and _HEX.fullmatch(msg_id) is not None


class HeldFile:
    """One such file: appended to (buffered until ``flush``), read whole, replaced whole."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._size = 0
        self.pending = bytearray()  # records added, not written yet

    def read(self) -> Contents:
        try:
            with open(self.path, "rb") as handle:
                return parse(handle.read(), self.path)
        except FileNotFoundError:
            return Contents({})

    def add(self, data: bytes) -> None:
        """Append records at the next ``flush`` (or put them on ``pending`` directly)."""
        self.pending += data

    def flush(self) -> None:
        """Write what was added, in one write; OSError if the disk refuses it (then nothing
        of it stays in the file, and it is still pending)."""
        if not self.pending:
            return
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._size = os.fstat(self._fd).st_size
            if self._size == 0:
                self.pending[:0] = MAGIC
        try:
            written = os.write(self._fd, self.pending)
            if written < len(self.pending):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            os.ftruncate(self._fd, self._size)  # no partial record for later appends to follow
            raise
        self._size += written
        self.pending.clear()

    def replace(self, records: list[bytes]) -> None:
        """Make the file exactly ``records`` (removed if none), dropping anything pending."""
        self.close()
        self.pending.clear()
        if records:
            write_atomically(self.path, MAGIC + b"".join(records), fsync=False)
        else:
            self.remove()

    def remove(self) -> None:
        self.close()
        self.pending.clear()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Close the file (anything pending stays pending)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
