"""Message TTL (beyond NSQ: --msg-ttl, ``POST /topic/ttl``): a topic's messages older than
its TTL are dropped before delivery and counted, never delivered.

NSQ keeps a message until a consumer finishes it, however old; its advice is an expiry in
the body that consumers check (nsqio/nsq#302, #1396), which still stores and delivers every
stale message, and a topic nobody reads grows until the disk is full. Here a topic may have
a maximum age: --msg-ttl for every topic (dead-letter topics excepted: they keep what they
get unless given a TTL of their own), or the topic's own, set over HTTP and kept in
nsqd.dat as an extra key of the topic (``"msg_ttl"``, milliseconds; NSQ's nsqd ignores it).
A message's age runs from its timestamp, set when it was published (REQ, timeouts and
restarts keep it), against this host's clock.

Expired messages are dropped in two places:

* on delivery: the channel's screen (nsqd/screen.py), which Client.send_messages runs on
  every message it is about to send, drops one older than the TTL instead. The cutoff is
  taken from the clock once per batch of deliveries, and compared with the message's first
  8 bytes as bytes: big-endian timestamps after 1970 order as their bytes do, so no
  message is decoded for it;
* by a sweep, every SWEEP_INTERVAL, from the head of each topic's and channel's queue,
  memory then disk, up to SWEEP_LIMIT messages a queue per sweep and until the first one
  that is not expired (go-diskqueue reads in order; a later expired message waits for its
  delivery check). So a backlog nobody consumes holds about a TTL's worth of messages, and
  its disk files are freed as they are passed. Deferred messages are checked when due.

Counted per topic (dropped from its own queue, while it has no channel or is paused) and
per channel, as ``expired_count`` in /stats.
"""

import logging
import struct
import time

import trio

from common.goflags import FlagError, parse_duration_ns

from .screen import Part

log = logging.getLogger("nsqd")

SWEEP_INTERVAL = 1.0
SWEEP_LIMIT = 10_000
METADATA_KEY = "msg_ttl"
_TIMESTAMP = struct.Struct(">q")


def parse_ttl(text: str) -> int | None:
    """``POST /topic/ttl``'s value in ns: a Go duration (``0`` = none), or None for ``default``."""
    if text == "default":
        return None
    ttl_ns = parse_duration_ns(text)
    if ttl_ns < 0:
        raise FlagError(f"negative TTL {text!r}")
    return ttl_ns


class MessageTTL:
    def __init__(self, nsqd):
        self.nsqd = nsqd
        self.default_ns = round(nsqd.opts.msg_ttl * 1e9)
        self.overrides: dict[str, int] = {}  # topic name -> its own TTL in ns (0: none)
        self.expired: dict[object, int] = {}  # topic or channel -> messages dropped for age
        self._changed = trio.Event()

    def ttl_ns(self, topic) -> int:
        """The topic's TTL in ns, 0 for none."""
        own = self.overrides.get(topic.name)
        if own is not None:
            return own
        if not self.default_ns:
            return 0
        return 0 if self.nsqd.dead_letters.is_dead_letter_topic(topic.name) else self.default_ns

    def set(self, topic, ttl_ns: int | None) -> None:
        """The topic's own TTL (None: --msg-ttl's again); its channels' screens follow."""
        if ttl_ns is None:
            self.overrides.pop(topic.name, None)
        else:
            self.overrides[topic.name] = ttl_ns
        for channel in topic.channels.values():
            self.nsqd.refresh_screen(channel)
        self._changed.set()

    def load(self, topic, extras: dict) -> None:
        """The topic's TTL as nsqd.dat keeps it."""
        millis = extras.get(METADATA_KEY)
        if millis is not None:
            self.overrides[topic.name] = millis * 1_000_000

    def metadata(self, topic) -> dict:
        own = self.overrides.get(topic.name)
        return {} if own is None else {METADATA_KEY: own // 1_000_000}

    def forget_topic(self, topic) -> None:
        """The topic was deleted: its TTL and count go (a new topic of that name starts afresh)."""
        self.overrides.pop(topic.name, None)
        self.expired.pop(topic, None)

    def forget_channel(self, channel) -> None:
        self.expired.pop(channel, None)

    def _shown(self, topic) -> bool:
        """Whether /stats shows the topic's TTL keys: it has a TTL, or dropped messages once."""
        if not (self.default_ns or self.overrides or self.expired):  # no TTL anywhere: /stats of 10,000 topics
            return False
        return bool(self.ttl_ns(topic)) or topic in self.expired or any(
            channel in self.expired for channel in topic.channels.values())

    def topic_stats(self, topic) -> dict:
        """/stats keys beyond NSQ's: ``msg_ttl`` (ms, 0 = none) and ``expired_count``."""
        if not self._shown(topic):
            return {}
        return {"msg_ttl": self.ttl_ns(topic) // 1_000_000, "expired_count": self.expired.get(topic, 0)}

    def channel_stats(self, channel) -> dict:
        return {"expired_count": self.expired.get(channel, 0)} if self._shown(channel.topic) else {}

    def check_for(self, channel) -> Part | None:
        """The screen part of ``channel`` (nsqd/screen.py), or None when its topic has no TTL:
        each batch's ``check(message) -> True`` if the message is expired (counted)."""
        ttl_ns = self.ttl_ns(channel.topic)
        if not ttl_ns:
            return None
        expired = self.expired

        def batch_check():
            cutoff = _TIMESTAMP.pack(max(0, time.time_ns() - ttl_ns))  # a message below it is older than the TTL

            def is_expired(message: bytes) -> bool:
                if message >= cutoff:
                    return False
                expired[channel] = expired.get(channel, 0) + 1
                return True

            return is_expired

        return Part(batch_check)

    async def run(self) -> None:
        """Sweep the queues of every topic with a TTL, every SWEEP_INTERVAL."""
        while True:
            if not self.default_ns and not any(self.overrides.values()):
                self._changed = trio.Event()
                await self._changed.wait()
            await trio.sleep(SWEEP_INTERVAL)
            self.sweep()

    def sweep(self) -> None:
        now = time.time_ns()
        for topic in list(self.nsqd.topics.values()):
            ttl_ns = self.ttl_ns(topic)
            if not ttl_ns:
                continue
            for owner in (topic, *topic.channels.values()):
                dropped = drop_older_than(owner.queue, now - ttl_ns)
                if dropped:
                    self.expired[owner] = self.expired.get(owner, 0) + dropped
                    log.debug("%s: dropped %d messages older than their TTL", owner.queue.name, dropped)


def drop_older_than(queue, cutoff_ns: int) -> int:
    """Drop messages published before ``cutoff_ns`` from the head of a MessageQueue, memory
    then disk, up to SWEEP_LIMIT; how many."""
    dropped = 0
    messages = queue.messages
    while messages and dropped < SWEEP_LIMIT and _TIMESTAMP.unpack_from(messages.first())[0] < cutoff_ns:
        queue.take_from_memory(1)  # through the queue, which may count its bytes (nsqd/queue_bound.py)
        dropped += 1
    backend = queue.backend
    if backend is None:
        return dropped
    on_disk = 0
    while dropped + on_disk < SWEEP_LIMIT:
        payload = backend.peek()
        if payload is None or _TIMESTAMP.unpack_from(payload)[0] >= cutoff_ns or not queue.take_from_disk(1):
            break
        on_disk += 1
    return dropped + on_disk
