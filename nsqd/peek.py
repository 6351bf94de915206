"""Peek at a channel's backlog (beyond NSQ: --enable-peek, ``GET /channel/peek``; nsqio/nsq#848,
#1482, #1412, #375, where NSQ's answer is "not possible": a new channel sees only new messages).

``GET /channel/peek?topic=T&channel=C[&n=10][&max_body=4096]`` answers the next ``n`` (1 to
MAX_COUNT) messages queued in the channel on this nsqd, in the order the channel will deliver
them: its memory queue first (a consumer that becomes ready drains memory before disk,
nsqd/channel.py), then its disk queue from the read position on. Nothing is taken, reordered or
delayed: the memory part is a copy of up to ``n`` references, the disk part is read from the
files by position through descriptors of its own, and the disk queue's positions, metadata and
open files are not touched. In-flight and deferred messages are not queued and not shown (their
counts are in the answer); neither is what a paused topic still holds for its channels.

The answer is a snapshot of the moment of the request. The files are read in a worker thread
(``trio.to_thread``) and the answer's JSON is built there too, message by message, so the event
loop only copies the memory part's references and the disk queue's four positions; the thread
gives up the GIL after each message (a read from disk does; a message from memory yields it), so
the loop never waits for Python's 5 ms switch interval. If a file
the snapshot needs is gone when the thread reaches it (a consumer read it to its end and it was
removed, or the channel was emptied), the peek starts again from a new snapshot, up to ATTEMPTS
times, and then answers what it had read. A record the disk queue would find corrupt ends its
file for the peek as it would for the reader (which moves on to the next file).

Each message: ``id``, ``timestamp`` (ns), ``attempts`` (deliveries so far; the next delivery
carries one more), ``size`` (of the body), ``body`` (base64 of at most ``max_body`` bytes, 0 to
MAX_BODY), ``truncated`` and ``queue`` (``memory`` or ``disk``).
"""

import base64
import json
import logging
import os
import struct
import time
from itertools import islice

import trio

from common.message import HEADER_LENGTH, TIMESTAMP_ATTEMPTS, header_id

log = logging.getLogger("nsqd")

MAX_COUNT = 100
DEFAULT_COUNT = 10
MAX_BODY = 16384  # the largest answer is then about 2.2 MB of JSON
DEFAULT_MAX_BODY = 4096
ATTEMPTS = 3
_RECORD_HEAD = struct.Struct(">i")


def parse_count(text: str) -> int:
    """``n``: how many messages, 1 to MAX_COUNT."""
    if not text.isdigit() or not 1 <= int(text) <= MAX_COUNT:
        raise ValueError(f"n {text!r} is not in [1, {MAX_COUNT}]")
    return int(text)


def parse_max_body(text: str) -> int:
    """``max_body``: body bytes shown per message, 0 to MAX_BODY."""
    if not text.isdigit() or int(text) > MAX_BODY:
        raise ValueError(f"max_body {text!r} is not in [0, {MAX_BODY}]")
    return int(text)


class _Snapshot:
    """What the peek reads, taken on the event loop: references to the memory part's first
    messages and the disk queue's read and write positions (the files are read elsewhere)."""

    def __init__(self, channel, count: int):
        queue = channel.queue
        self.memory = list(islice(queue.messages, count))
        self.disk = queue.backend if len(self.memory) < count and queue.has_backend_data() else None
        if self.disk is not None:
            self.read_from = self.disk.read_position()
            self.write_end = self.disk.end_position()
            self.smallest, self.largest = self.disk.min_msg_size, self.disk.max_msg_size
            self.file_name = self.disk.file_name
        self.stats = {"topic_name": channel.topic.name, "channel_name": channel.name, "depth": channel.depth,
                      "backend_depth": channel.backend_depth, "in_flight_count": channel.in_flight_count,
                      "deferred_count": channel.deferred_count, "paused": channel.paused}

    def answer(self, count: int, max_body: int) -> tuple[bytes, bool]:
        """The JSON answer (in a worker thread): the memory part, then records read from disk; and
        whether every file the snapshot needed was still there."""
        parts = []
        for message in self.memory:
            parts.append(_message_json(message[:HEADER_LENGTH], message[HEADER_LENGTH:HEADER_LENGTH + max_body],
                                       len(message) - HEADER_LENGTH, "memory"))
            time.sleep(0)  # lets the event loop's thread have the GIL now, not after the 5 ms switch interval
        complete = True
        if self.disk is not None:
            complete = self._read_disk(parts, count, max_body)
        head = json.dumps(self.stats, separators=(",", ":"))[:-1].encode()
        return head + b',"messages":[' + b",".join(parts) + b"]}", complete

    def _read_disk(self, parts: list[bytes], count: int, max_body: int) -> bool:
        """Append records from the read position on, file by file, until ``count``; False if a
        file was gone."""
        (number, position), (last, end_of_last) = self.read_from, self.write_end
        while len(parts) < count and (number, position) < (last, end_of_last):
            try:
                fd = os.open(self.file_name(number), os.O_RDONLY)
            except FileNotFoundError:
                return False
            try:
                end = end_of_last if number == last else os.fstat(fd).st_size
                while len(parts) < count and position + 4 + HEADER_LENGTH <= end:
                    head = os.pread(fd, 4 + HEADER_LENGTH, position)
                    size = _RECORD_HEAD.unpack_from(head)[0] if len(head) == 4 + HEADER_LENGTH else -1
                    if not self.smallest <= size <= self.largest or size < HEADER_LENGTH or position + 4 + size > end:
                        break  # what the reader would find corrupt: it moves on to the next file
                    body_size = size - HEADER_LENGTH
                    body = os.pread(fd, min(body_size, max_body), position + 4 + HEADER_LENGTH) if max_body else b""
                    parts.append(_message_json(head[4:], body, body_size, "disk"))
                    position += 4 + size
            finally:
                os.close(fd)
            number, position = number + 1, 0
        return True


def _message_json(header: bytes, body: bytes, size: int, queue: str) -> bytes:
    timestamp, attempts = TIMESTAMP_ATTEMPTS.unpack_from(header)
    return json.dumps({"id": header_id(header).decode("ascii", "replace"), "timestamp": timestamp,
                       "attempts": attempts, "size": size, "body": base64.b64encode(body).decode("ascii"),
                       "truncated": len(body) < size, "queue": queue}, separators=(",", ":")).encode()


async def peek(channel, count: int, max_body: int) -> bytes:
    """The JSON answer of ``GET /channel/peek`` for ``channel``."""
    for attempt in range(1, ATTEMPTS + 1):
        answer, complete = await trio.to_thread.run_sync(_Snapshot(channel, count).answer, count, max_body)
        if complete:
            break
        log.debug("%s: a disk queue file was removed during a peek (attempt %d)", channel, attempt)
    return answer
