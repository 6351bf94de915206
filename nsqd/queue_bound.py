"""Bounded queues (beyond NSQ: --max-queue-bytes, --queue-full, ``POST /topic/max_queue_bytes``).

NSQ's queues are bounded only by the disk (nsqio/nsq#549, #796, go-diskqueue#27): a topic
nobody reads fills it, and then every topic on the node fails. Here a topic may have a
bound, in bytes of messages (NSQ's encoding: the 26-byte header and the body; the 4-byte
length of a record on disk is not counted), that holds separately for the topic's own queue
and for each of its channels' queues, memory and disk together. The bound is
--max-queue-bytes for every topic, or the topic's own, set over HTTP and kept in nsqd.dat as
an extra key of the topic (``"max_queue_bytes"``; NSQ's nsqd ignores it); 0 lifts it.

A publish (PUB, MPUB, DPUB, POST /pub, /mpub) is checked before anything of it is stored,
against the topic's queue and every channel's, as if each were to queue all of it:

* ``--queue-full=refuse``: if any of them would pass the bound, the whole publish is refused
  (E_PUB_FAILED / E_MPUB_FAILED / E_DPUB_FAILED over TCP, which closes the connection as
  every E_*_FAILED does in NSQ; HTTP 503 ``QUEUE_FULL``) and counted (``refused_count``).
  NSQ's fan-out copies every message to every channel and cannot leave one out, so one full
  channel refuses the topic's publishes until it has room again (consumed, emptied, or the
  channel deleted). Nothing already accepted is dropped: REQs, timeouts and deferred
  messages coming due go back into their queue whatever its fill.
* ``--queue-full=drop-oldest``: each queue that would pass the bound first drops its oldest
  messages (the older of its memory and disk heads, by timestamp) until the publish fits,
  counted as ``dropped_count`` of the topic or channel. Messages in flight or deferred are
  never dropped. A publish is never refused for room, but
* under both policies a publish larger than the bound by itself is refused.

Not counted: messages in flight and deferred ones (bounded by RDY and by --max-req-timeout);
messages nsqd moves itself (a topic's backlog handed to a channel that appears, dead letters)
are not refused, so a queue may pass its bound by what its topic held before it existed.

While its topic has a bound, a queue counts its bytes as messages come and go
(nsqd/message_queue.py); counting starts from the memory part and an estimate of the disk
part from its files' sizes and positions. The count is in /stats (``queue_bytes``, beside
``max_queue_bytes``), /metrics and nsqadmin. An unbounded topic costs one attribute test
per publish.
"""

import os

from common.goflags import FlagError
from common.message import HEADER_LENGTH

from .group_commit import PublishFailed

METADATA_KEY = "max_queue_bytes"
MAX_BOUND = (1 << 63) - 1  # an int64, as NSQ's sizes are
REFUSE = "refuse"
DROP_OLDEST = "drop-oldest"
POLICIES = (REFUSE, DROP_OLDEST)
RECORD_LENGTH = 4  # a disk record's length prefix


class QueueFull(PublishFailed):
    """A publish refused for room (``PublishFailed`` whose HTTP answer is 503 QUEUE_FULL)."""

    http_text = "QUEUE_FULL"


def check_bound_flags(bound: int, policy: str) -> None:
    if not 0 <= bound <= MAX_BOUND:
        raise FlagError(f"--max-queue-bytes must be in [0, {MAX_BOUND}], got {bound}")
    if policy not in POLICIES:
        raise FlagError(f"--queue-full must be one of {', '.join(POLICIES)}, got {policy!r}")


def parse_bound(text: str) -> int | None:
    """``POST /topic/max_queue_bytes``' value: bytes, 0 to 2^63-1 (0: none), or None for ``default``."""
    if text == "default":
        return None
    if not text.isascii() or not text.isdigit() or int(text) > MAX_BOUND:
        raise ValueError(f"max_queue_bytes {text!r} is not an integer in [0, {MAX_BOUND}]")
    return int(text)


def disk_bytes(backend) -> int:
    """An estimate of the message bytes a DiskQueue holds: its files between the read and
    write positions, less a record length for each record of its depth."""
    if not backend.has_data():
        return 0
    total = backend.write_pos - backend.read_pos
    for number in range(backend.read_file_num, backend.write_file_num):
        try:
            total += os.path.getsize(backend.file_name(number))
        except OSError:
            pass  # read to its end and removed already
    return max(0, total - RECORD_LENGTH * max(backend.depth, 0))


def drop_oldest(queue, excess: int) -> int:
    """Drop a MessageQueue's oldest messages until ``excess`` bytes are freed or it is empty; how many."""
    dropped = freed = 0
    while freed < excess and queue.has_messages():
        from_memory = bool(queue.messages)
        if from_memory and queue.has_backend_data():
            head = queue.backend.peek()
            from_memory = head is None or queue.messages.first()[:8] <= head[:8]  # big-endian timestamps
        taken = queue.take_from_memory(1) if from_memory else queue.take_from_disk(1)
        if not taken:
            break  # the disk could not be read
        freed += len(taken[0])
        dropped += 1
    return dropped


class QueueBounds:
    """Every topic's bound: --max-queue-bytes, or the topic's own (``POST /topic/max_queue_bytes``)."""

    def __init__(self, nsqd):
        self.nsqd = nsqd
        self.default_bound = nsqd.opts.max_queue_bytes
        self.policy = nsqd.opts.queue_full
        self.overrides: dict[str, int] = {}  # topic name -> its own bound (0: none)
        self.dropped: dict[object, int] = {}  # topic or channel -> messages dropped for room
        self.refused: dict[object, int] = {}  # topic -> messages refused for room

    def bound(self, topic) -> int:
        own = self.overrides.get(topic.name)
        return self.default_bound if own is None else own

    def apply(self, topic) -> None:
        """The topic and its channels' queues count their bytes while it has a bound."""
        bound = self.bound(topic)
        topic.set_queue_bound(bound)
        topic.queue.count_bytes(bool(bound))
        for channel in topic.channels.values():
            channel.queue.count_bytes(bool(bound))

    def channel_created(self, channel) -> None:
        channel.queue.count_bytes(bool(channel.topic.queue_bound))

    def set(self, topic, bound: int | None) -> None:
        """The topic's own bound (None: --max-queue-bytes' again)."""
        if bound is None:
            self.overrides.pop(topic.name, None)
        else:
            self.overrides[topic.name] = bound
        self.apply(topic)

    def load(self, topic, extras: dict) -> None:
        """The topic's bound as nsqd.dat keeps it."""
        if METADATA_KEY in extras:
            self.set(topic, min(extras[METADATA_KEY], MAX_BOUND))

    def metadata(self, topic) -> dict:
        own = self.overrides.get(topic.name)
        return {} if own is None else {METADATA_KEY: own}

    def forget_topic(self, topic) -> None:
        self.overrides.pop(topic.name, None)
        self.dropped.pop(topic, None)
        self.refused.pop(topic, None)

    def forget_channel(self, channel) -> None:
        self.dropped.pop(channel, None)

    def admit(self, topic, bodies: list[bytes]) -> None:
        """Room for a publish to a bounded topic, made by the policy, or QueueFull."""
        bound = topic.queue_bound
        size = sum(map(len, bodies)) + HEADER_LENGTH * len(bodies)
        owners = (topic, *topic.channels.values())
        if size > bound:
            self._refuse(topic, len(bodies), f"{size} bytes of messages exceed the bound of {bound}")
        for owner in owners:
            excess = owner.queue.held_bytes + size - bound
            if excess <= 0:
                continue
            if self.policy == REFUSE:
                self._refuse(topic, len(bodies), f"{_described(owner)} holds {owner.queue.held_bytes} "
                                                 f"of its {bound} bytes")
            dropped = drop_oldest(owner.queue, excess)
            if dropped:
                self.dropped[owner] = self.dropped.get(owner, 0) + dropped

    def _refuse(self, topic, count: int, why: str):
        self.refused[topic] = self.refused.get(topic, 0) + count
        raise QueueFull(f"queue full: {why}")

    def topic_stats(self, topic) -> dict:
        """/stats keys beyond NSQ's, while the topic has a bound or counted something."""
        if not topic.queue_bound and topic not in self.dropped and topic not in self.refused:
            return {}
        return {"max_queue_bytes": topic.queue_bound, "queue_bytes": topic.queue.held_bytes or 0,
                "queue_full": self.policy, "dropped_count": self.dropped.get(topic, 0),
                "refused_count": self.refused.get(topic, 0)}

    def channel_stats(self, channel) -> dict:
        if not channel.topic.queue_bound and channel not in self.dropped:
            return {}
        return {"max_queue_bytes": channel.topic.queue_bound, "queue_bytes": channel.queue.held_bytes or 0,
                "dropped_count": self.dropped.get(channel, 0)}


def _described(owner) -> str:
    topic = getattr(owner, "topic", None)
    return f"topic {owner.name}" if topic is None else f"channel {topic.name}:{owner.name}"
