"""The queue behind every topic and channel: memory first, then the disk queue.

Up to --mem-queue-size messages wait in memory as (header, body) pairs; the rest go to
the go-diskqueue-compatible DiskQueue named after the topic (``topic``) or channel
(``topic:channel``). An ephemeral topic or channel has no disk queue: what does not fit
in memory is dropped, as NSQ drops it.

A disk write that fails raises OSError after updating nsqd's health, so the publisher
hears of it; ``requeue`` never loses a message it was handed: if the disk refuses (or
the queue is ephemeral), the message stays in memory past the limit.
"""

import logging
from collections import deque

from common.message import HEADER_LENGTH

log = logging.getLogger("nsqd")


class MessageQueue:
    def __init__(self, name: str, nsqd, ephemeral: bool):
        self.name = name
        self.nsqd = nsqd
        self.capacity = nsqd.opts.mem_queue_size
        self.headers: deque[bytes] = deque()
        self.bodies: deque[bytes] = deque()
        self.backend = None if ephemeral else nsqd.open_diskqueue(name)

    def __len__(self) -> int:
        return len(self.headers) + self.backend_depth

    @property
    def backend_depth(self) -> int:
        return self.backend.depth if self.backend is not None else 0

    def has_backend_data(self) -> bool:
        return self.backend is not None and self.backend.has_data()

    def put(self, headers: list[bytes], bodies: list[bytes]) -> None:
        """Queue new messages; raises OSError if the part for the disk could not be written."""
        room = self.capacity - len(self.headers)
        if room >= len(headers):
            self.headers.extend(headers)
            self.bodies.extend(bodies)
            return
        if room > 0:
            self.headers.extend(headers[:room])
            self.bodies.extend(bodies[:room])
            headers, bodies = headers[room:], bodies[room:]
        self._to_disk(headers, bodies)

    def requeue(self, header: bytes, body: bytes) -> None:
        """Queue a message that was already accepted and delivered once: it is never dropped,
        neither for a disk error nor because an ephemeral queue is full."""
        if len(self.headers) < self.capacity or self.backend is None:
            self.headers.append(header)
            self.bodies.append(body)
            return
        try:
            self._to_disk([header], [body])
        except OSError:
            self.headers.append(header)
            self.bodies.append(body)

    def _to_disk(self, headers: list[bytes], bodies: list[bytes]) -> None:
        if self.backend is None:
            log.debug("%s: memory queue full, dropping %d ephemeral messages", self.name, len(headers))
            return
        try:
            self.backend.put([header + body for header, body in zip(headers, bodies)])
        except OSError as exc:
            self.nsqd.disk_failed(self.name, exc)
            raise
        self.nsqd.disk_written(self.backend)

    def take_from_memory(self, count: int) -> tuple[list[bytes], list[bytes]]:
        """Up to ``count`` messages from the memory part (they leave it)."""
        count = min(count, len(self.headers))
        pop_header, pop_body = self.headers.popleft, self.bodies.popleft
        return [pop_header() for _ in range(count)], [pop_body() for _ in range(count)]

    def take_from_disk(self, count: int) -> tuple[list[bytes], list[bytes]]:
        """Up to ``count`` messages off the disk queue (they leave it)."""
        try:
            payloads = self.backend.read(count)
        except OSError as exc:
            self.nsqd.disk_failed(self.name, exc)
            return [], []
        self.nsqd.disk_used(self.backend)
        return [payload[:HEADER_LENGTH] for payload in payloads], [payload[HEADER_LENGTH:] for payload in payloads]

    def take(self, count: int) -> tuple[list[bytes], list[bytes]]:
        """Up to ``count`` messages, memory first, then disk."""
        headers, bodies = self.take_from_memory(count)
        if len(headers) < count and self.has_backend_data():
            from_disk = self.take_from_disk(count - len(headers))
            headers += from_disk[0]
            bodies += from_disk[1]
        return headers, bodies

    def empty(self) -> None:
        self.headers.clear()
        self.bodies.clear()
        if self.backend is not None:
            self.backend.empty()

    def delete(self) -> None:
        self.headers.clear()
        self.bodies.clear()
        if self.backend is not None:
            self.backend.delete()
            self.nsqd.forget_diskqueue(self.backend)

    def close(self, extra: list[tuple[bytes, bytes]] = ()) -> None:
        """Graceful stop: memory (and ``extra``: in-flight, deferred) to disk, then sync."""
        if self.backend is None:
            return
        held = list(zip(self.headers, self.bodies)) + list(extra)
        self.headers.clear()
        self.bodies.clear()
        try:
            if held:
                self.backend.put([header + body for header, body in held])
            self.backend.close()
        except OSError as exc:
            log.error("%s: failed to write %d messages to disk at exit: %s", self.name, len(held), exc)
        self.nsqd.forget_diskqueue(self.backend)
