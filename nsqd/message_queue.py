"""The queue behind every topic and channel: memory first, then the disk queue.

Up to --mem-queue-size messages wait in memory (each one bytes object, nsqd/message.py);
the rest go, as they are, to the go-diskqueue-compatible DiskQueue named after the topic
(``topic``) or channel (``topic:channel``). An ephemeral topic or channel has no disk
queue: what does not fit in memory is dropped, as NSQ drops it.

A disk write that fails raises OSError after updating nsqd's health, so the publisher
hears of it; ``requeue`` never loses a message it was handed: if the disk refuses (or
the queue is ephemeral), the message stays in memory past the limit.
"""

import logging
from collections import deque

log = logging.getLogger("nsqd")


class MessageQueue:
    def __init__(self, name: str, nsqd, ephemeral: bool):
        self.name = name
        self.nsqd = nsqd
        self.capacity = nsqd.opts.mem_queue_size
        self.messages: deque[bytes] = deque()
        self.backend = None if ephemeral else nsqd.open_diskqueue(name)

    def __len__(self) -> int:
        return len(self.messages) + self.backend_depth

    @property
    def backend_depth(self) -> int:
        # never below zero: a data directory from another nsqd may carry a depth that undercounts
        return max(self.backend.depth, 0) if self.backend is not None else 0

    def has_backend_data(self) -> bool:
        return self.backend is not None and self.backend.has_data()

    def has_messages(self) -> bool:
        """Anything to take: the disk queue is asked for records, not for its depth, which after
        a kill -9 can be short of them (go-diskqueue's metadata is written at its syncs)."""
        return bool(self.messages) or self.has_backend_data()

    def put(self, messages: list[bytes]) -> None:
        """Queue new messages; raises OSError if the part for the disk could not be written."""
        room = self.capacity - len(self.messages)
        if room >= len(messages):
            self.messages.extend(messages)
            return
        if room > 0:
            self.messages.extend(messages[:room])
            messages = messages[room:]
        self._to_disk(messages)

    def requeue(self, message: bytes) -> bool:
        """Queue a message that was already accepted and delivered once: it is never dropped,
        neither for a disk error nor because an ephemeral queue is full. Whether it went to disk."""
        if len(self.messages) < self.capacity or self.backend is None:
            self.messages.append(message)
            return False
        try:
            self._to_disk([message])
        except OSError:
            self.messages.append(message)
            return False
        return True

    def _to_disk(self, messages: list[bytes]) -> None:
        if self.backend is None:
            log.debug("%s: memory queue full, dropping %d ephemeral messages", self.name, len(messages))
            return
        try:
            self.backend.put(messages)
        except OSError as exc:
            self.nsqd.disk_failed(self.name, exc)
            raise
        self.nsqd.disk_written(self.backend)

    def take_from_memory(self, count: int) -> list[bytes]:
        """Up to ``count`` messages from the memory part (they leave it)."""
        messages = self.messages
        if count >= len(messages):
            taken = list(messages)
            messages.clear()
            return taken
        pop = messages.popleft
        return [pop() for _ in range(count)]

    def take_from_disk(self, count: int) -> list[bytes]:
        """Up to ``count`` messages off the disk queue (they leave it)."""
        try:
            messages = self.backend.read(count)
        except OSError as exc:
            self.nsqd.disk_failed(self.name, exc)
            return []
        self.nsqd.disk_used(self.backend)
        return messages

    def take(self, count: int) -> list[bytes]:
        """Up to ``count`` messages, memory first, then disk."""
        messages = self.take_from_memory(count)
        if len(messages) < count and self.has_backend_data():
            messages += self.take_from_disk(count - len(messages))
        return messages

    def empty(self) -> None:
        self.messages.clear()
        if self.backend is not None:
            self.backend.empty()

    def delete(self) -> None:
        self.messages.clear()
        if self.backend is not None:
            self.backend.delete()
            self.nsqd.forget_diskqueue(self.backend)

    def close(self, extra: list[bytes] = ()) -> None:
        """Graceful stop: memory (and ``extra``: in-flight, deferred) to disk, then sync."""
        if self.backend is None:
            return
        held = [*self.messages, *extra]
        self.messages.clear()
        try:
            if held:
                self.backend.put(held)
            self.backend.close()
        except OSError as exc:
            log.error("%s: failed to write %d messages to disk at exit: %s", self.name, len(held), exc)
        self.nsqd.forget_diskqueue(self.backend)
