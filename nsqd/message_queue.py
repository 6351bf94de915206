"""The queue behind every topic and channel: memory first, then the disk queue.

Up to --mem-queue-size messages wait in memory (each one bytes object, nsqd/message.py, in
blocks the cyclic collector does not walk message by message: nsqd/chunked_queue.py);
the rest go, as they are, to the go-diskqueue-compatible DiskQueue named after the topic
(``topic``) or channel (``topic:channel``). An empty memory queue is the empty tuple, not a
ChunkedQueue: its deque is 760 bytes even empty, which idle topics and channels would hold for nothing. An ephemeral topic or channel has no disk
queue: what does not fit in memory is dropped, as NSQ drops it.

A disk write that fails raises OSError after updating nsqd's health, so the publisher
hears of it; ``requeue`` never loses a message it was handed: if the disk refuses (or
the queue is ephemeral), the message stays in memory past the limit.

Beyond NSQ, while its topic has a --max-queue-bytes bound (nsqd/queue_bound.py) a queue
counts the bytes of the messages it holds, memory and disk (``held_bytes``; None when not
counting, so an unbounded queue pays one attribute test per batch).
"""

import logging

from .chunked_queue import ChunkedQueue
from .queue_bound import disk_bytes
from .slices import RELEASE_STEP

log = logging.getLogger("nsqd")

NONE_IN_MEMORY = ()  # ``messages`` while none are in memory


def queue_name(topic_name: str, channel_name: str | None = None) -> str:
    """The name of the topic's queue, or of its channel's (NSQ's getBackendName): its files' names begin with it."""
    return topic_name if channel_name is None else f"{topic_name}:{channel_name}"


class MessageQueue:
    def __init__(self, name: str, nsqd, ephemeral: bool):
        self.name = name
        self.nsqd = nsqd
        self.capacity = nsqd.opts.mem_queue_size
        self.messages: ChunkedQueue | tuple = NONE_IN_MEMORY
        self.backend = None if ephemeral else nsqd.open_diskqueue(name)
        self.held_bytes: int | None = None

    def count_bytes(self, counting: bool) -> None:
        """Start (from what is held now: nsqd/queue_bound.py estimates the disk part) or stop
        counting ``held_bytes``."""
        if not counting:
            self.held_bytes = None
        elif self.held_bytes is None:
            self.held_bytes = sum(map(len, self.messages)) + (disk_bytes(self.backend) if self.backend else 0)

    def _count_taken(self, messages: list[bytes]) -> None:
        self.held_bytes -= sum(map(len, messages))
        if self.held_bytes < 0 or not self.has_messages():
            self.held_bytes = 0  # what a skipped corrupt file held is forgotten once the queue is empty

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
            self._hold(messages)
            if self.held_bytes is not None:
                self.held_bytes += sum(map(len, messages))
            return
        if room > 0:
            self._hold(messages[:room])
            if self.held_bytes is not None:
                self.held_bytes += sum(map(len, messages[:room]))
            messages = messages[room:]
        self._to_disk(messages)

    def _hold(self, messages) -> None:
        if self.messages:
            self.messages.extend(messages)
        else:
            self.messages = ChunkedQueue(messages)

    def requeue(self, message: bytes) -> bool:
        """Queue a message that was already accepted and delivered once: it is never dropped,
        neither for a disk error nor because an ephemeral queue is full. Whether it went to disk."""
        if self.held_bytes is not None:
            self.held_bytes += len(message)
        if len(self.messages) < self.capacity or self.backend is None:
            self._hold((message,))
            return False
        try:
            self._to_disk([message])
        except OSError:
            self._hold((message,))
            return False
        return True

    def _to_disk(self, messages: list[bytes]) -> None:
        if self.backend is None:
            log.debug("%s: memory queue full, dropping %d ephemeral messages", self.name, len(messages))
            return
        try:
            self.backend.put(messages)
        except OSError as exc:
            self.nsqd.disk_used(self.backend)  # the batches written before the failure are synced in time
            self.nsqd.disk_failed(self.name, exc)
            raise
        self.nsqd.disk_written(self.backend)
        if self.held_bytes is not None:
            self.held_bytes += sum(map(len, messages))

    def take_from_memory(self, count: int) -> list[bytes]:
        """Up to ``count`` messages from the memory part (they leave it)."""
        messages = self.messages
        if count >= len(messages):
            taken = list(messages)
            if taken:
                messages.clear()  # a caller may hold it (message_ttl's sweep looks at it between takes)
                self.messages = NONE_IN_MEMORY
        else:
            taken = messages.take(count)
        if self.held_bytes is not None:
            self._count_taken(taken)
        return taken

    def take_from_disk(self, count: int) -> list[bytes]:
        """Up to ``count`` messages off the disk queue (they leave it)."""
        try:
            messages = self.backend.read(count)
        except OSError as exc:
            self.nsqd.disk_failed(self.name, exc)
            return []
        self.nsqd.disk_used(self.backend)
        if self.held_bytes is not None:
            self._count_taken(messages)
        return messages

    def take(self, count: int) -> list[bytes]:
        """Up to ``count`` messages, memory first, then disk."""
        messages = self.take_from_memory(count)
        if len(messages) < count and self.has_backend_data():
            messages += self.take_from_disk(count - len(messages))
        return messages

    def empty(self) -> None:
        self._drop_memory()
        if self.held_bytes is not None:
            self.held_bytes = 0
        if self.backend is not None:
            self.backend.empty()

    def delete(self) -> None:
        self._drop_memory()
        if self.backend is not None:
            self.nsqd.delete_diskqueue(self.backend)

    def _drop_memory(self) -> None:
        """The queue is empty at once; the messages are freed in slices (nsqd/slices.py)."""
        dropped, self.messages = self.messages, NONE_IN_MEMORY
        if len(dropped) > RELEASE_STEP:
            self.nsqd.release(dropped.released_steps())

    def close(self, extra: list[bytes] = ()) -> None:
        """Graceful stop: memory (and ``extra``: in-flight, deferred) to disk; nsqd runs the sync."""
        if self.backend is None:
            return
        held = [*self.messages, *extra]
        self.messages = NONE_IN_MEMORY
        try:
            if held:
                self.backend.put(held)
            self.nsqd.sync_at_exit(self.backend.closing_sync())
        except OSError as exc:
            log.error("%s: failed to write %d messages to disk at exit: %s", self.name, len(held), exc)
        self.nsqd.forget_diskqueue(self.backend)
