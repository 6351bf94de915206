"""Draining a node: deliver everything it holds, take nothing new, then exit (beyond NSQ v1.3).

NSQ's accepted design (nsqio/nsq#1302 and its open PR #1305; #821, #1022). A drain starts
with ``PUT /config/drain`` (body ``true``) or, with ``--sigterm=drain``, with SIGTERM, and
cannot be cancelled; SIGINT still stops nsqd at once, cleanly, keeping what is left on disk.
While it drains, nsqd:

* refuses new messages: PUB, MPUB and DPUB get ``E_<CMD>_FAILED <CMD> failed draining``,
  ``POST /pub`` and ``/mpub`` 503 ``DRAINING`` (``nsqd.publish`` raises PublishFailed);
* refuses new topics (SUB gets ``E_SUB_FAILED SUB failed draining``, ``/topic/create`` 503)
  and new channels, but for a topic that holds a backlog of its own and has no channel to
  take it (``accepts_channel``): without one its messages could never leave;
* tells its nsqlookupds to stop listing it: an UNREGISTER for every channel, then its topic
  (what a deleted topic sends), and no REGISTER on a reconnect. NSQ's lookupd wire protocol
  has no other way to say it, and a /lookup that no longer names the node keeps both new
  publishers and new consumers away; consumers connected at the start stay connected and
  drain it (go-nsq, pynsq and nsqjs never drop a connection because lookupd stopped naming
  it). The node stays in /nodes (its PINGs go on), so nsqadmin still shows its progress;
* keeps delivering, and every CHECK_INTERVAL counts what is left: each topic's own backlog
  (memory, disk, deferred messages held for a first channel) and each channel's queue
  (memory and disk), in-flight and deferred messages. When none is left it stops nsqd the
  ordinary way (nsqd.stop: nsqd.dat saved, the data directory unlocked), and the process
  exits 0.

A paused topic or channel keeps its messages, so it holds the drain until it is unpaused;
an ephemeral channel is deleted with its messages when its last consumer leaves, as always.
The state is not saved: an nsqd restarted during a drain serves normally.
"""

import logging
import time

import trio

from common.protocol_v1 import Unregister

log = logging.getLogger("nsqd")

CHECK_INTERVAL = 0.25  # seconds between counts of what is left; a count visits every topic and channel once
COUNT_SLICE = 200  # topics counted between yields to the event loop
COUNT_REST = 10  # after a count, rest at least this many times as long as it took (counting <= ~10% of a CPU)
DRAIN_VALUE = b"true"  # PUT /config/drain's body


class Drain:
    def __init__(self, nsqd):
        self.nsqd = nsqd
        self.start_time: int | None = None  # when the drain began (unix seconds), None before

    def start(self, reason: str) -> None:
        """Begin the drain; once only (a second start changes nothing)."""
        if self.start_time is not None:
            log.info("DRAIN: %s: already draining, %d messages left", reason, self.messages_left())
            return
        self.start_time = int(time.time())
        self.nsqd.refuse_new()
        log.info("DRAIN: %s: refusing new messages, topics and channels; %d messages left",
                 reason, self.messages_left())
        self._unregister_everything()
        self.nsqd.spawn(self._exit_when_empty)

    def _unregister_everything(self) -> None:
        """As every topic's deletion would (channels first, as nsqd's Topic.exit)."""
        lookup = self.nsqd.lookup
        for topic in self.nsqd.topics.values():
            for name in topic.channels:
                lookup.notify(Unregister(topic.name, name))
            lookup.notify(Unregister(topic.name))

    def accepts_channel(self, topic, name: str) -> bool:
        """Whether a SUB or /channel/create may have this channel while draining."""
        return name in topic.channels or (not topic.channels and topic.depth > 0)

    def messages_left(self) -> int:
        return sum(map(_held, self.nsqd.topics.values()))

    async def _messages_left_in_slices(self) -> int:
        """``messages_left``, yielding to the event loop every COUNT_SLICE topics: a count
        costs ~2 ms of CPU per thousand topics with two channels each."""
        left = 0
        for counted, topic in enumerate(list(self.nsqd.topics.values()), 1):
            left += _held(topic)
            if counted % COUNT_SLICE == 0:
                await trio.sleep(0)
        return left

    def stats(self) -> dict:
        """/stats' keys beyond NSQ while draining."""
        return {"draining": True, "drain_start_time": self.start_time, "drain_messages_left": self.messages_left()}

    async def _exit_when_empty(self) -> None:
        """Count until nothing is left; a count in slices can miss a message moving between
        topics meanwhile (a dead letter), so an empty one is confirmed by a count in one go."""
        while True:
            started = time.process_time()
            if not await self._messages_left_in_slices() and not self.messages_left():
                break
            await trio.sleep(max(CHECK_INTERVAL, COUNT_REST * (time.process_time() - started)))
        log.info("DRAIN: every topic and channel is empty after %ds: exiting", int(time.time()) - self.start_time)
        self.nsqd.stop()


def _held(topic) -> int:
    """The messages a topic and its channels hold: queued (memory and disk), in flight, deferred."""
    return topic.depth + sum(channel.depth + channel.in_flight_count + channel.deferred_count
                             for channel in topic.channels.values())


def parse_drain_value(body: bytes) -> None:
    """PUT /config/drain's body must be ``true``: ValueError otherwise."""
    if body.strip() != DRAIN_VALUE:
        raise ValueError("not true")
