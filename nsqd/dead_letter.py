"""Dead-letter topics (beyond NSQ: --max-attempts, --dead-letter-topic, ``POST /channel/max_attempts``).

NSQ counts a message's deliveries (its ``attempts``) but leaves giving up to each client
(go-nsq's MaxAttempts, pynsq's max_tries), which then FINishes the message and it is gone;
a client without the setting redelivers a poison message forever (nsqio/nsq#974, #591,
#1309). Here nsqd gives up itself: a message already delivered ``max attempts`` times on a
channel is not delivered again but published to the topic's dead-letter topic, whose name
--dead-letter-topic derives from the topic's (``%s.dead``: ``orders`` -> ``orders.dead``;
the topic's part is cut so the name keeps within NSQ's 64 characters). The limit is
--max-attempts for every durable channel, or the channel's own, set over HTTP and kept in
nsqd.dat as an extra key of the channel (``"max_attempts"``; NSQ's nsqd ignores it).
Ephemeral topics and channels, and dead-letter topics themselves (their names follow the
pattern), are left alone unless given a limit of their own.

The check runs on delivery, in the channel's screen (nsqd/screen.py): one comparison of
the message's attempts per message, whatever brought the message back (REQ, a timeout, a
client that left, a restart). A dead letter is a new message of the dead-letter topic
(its own ID and timestamp) whose body any NSQ client can read: one line of JSON, a
newline, then the original body byte for byte::

    {"topic":"orders","channel":"billing","id":"0a1b2c3d4e5f6a7b","attempts":5,
     "first_seen":1700000000123456789,"dead_lettered_at":1700000090000000000}\\n<body>

``attempts`` is how many times the message was delivered on the channel, ``first_seen``
its original timestamp (publish time, ns since the epoch). A message whose body is too
large to carry that line within --max-msg-size (NSQ's nsqd would refuse such a record in
the disk queue) stays on its channel and is delivered again, with a warning; so does one
the dead-letter topic cannot take (its disk failing), so nothing is ever lost.
"""

import json
import logging
import time

from common.goflags import FlagError
from common.message import HEADER_LENGTH, header_attempts, header_id
from common.names import MAX_NAME_LENGTH, is_valid_name

from .screen import Part

log = logging.getLogger("nsqd")

METADATA_KEY = "max_attempts"
MAX_LIMIT = 0xFFFF  # attempts is a uint16
PLACEHOLDER = "%s"


def check_pattern(pattern: str) -> None:
    """--dead-letter-topic: ``%s`` once, with something around it that makes a valid name."""
    if pattern.count(PLACEHOLDER) != 1 or pattern == PLACEHOLDER:
        raise FlagError(f"--dead-letter-topic {pattern!r} must hold %s once, with a prefix or suffix")
    if "#" in pattern or not is_valid_name(pattern.replace(PLACEHOLDER, "t")):
        raise FlagError(f"--dead-letter-topic {pattern!r} does not make valid non-ephemeral topic names")


def parse_limit(text: str) -> int | None:
    """``POST /channel/max_attempts``'s value: 0 to 65535 (0: none), or None for ``default``."""
    if text == "default":
        return None
    if not text.isdigit() or int(text) > MAX_LIMIT:
        raise ValueError(f"max_attempts {text!r} is not in [0, {MAX_LIMIT}]")
    return int(text)


class DeadLetters:
    def __init__(self, nsqd):
        self.nsqd = nsqd
        self.default_limit = nsqd.opts.max_attempts
        self.prefix, self.suffix = nsqd.opts.dead_letter_topic.split(PLACEHOLDER)
        self.overrides: dict[tuple[str, str], int] = {}  # (topic, channel) -> its own limit (0: none)
        self.counts: dict[object, int] = {}  # channel -> messages moved to the dead-letter topic

    def topic_name(self, topic_name: str) -> str:
        room = MAX_NAME_LENGTH - len(self.prefix) - len(self.suffix)
        return f"{self.prefix}{topic_name[:room]}{self.suffix}"

    def is_dead_letter_topic(self, name: str) -> bool:
        return (len(name) > len(self.prefix) + len(self.suffix) and name.startswith(self.prefix)
                and name.endswith(self.suffix))

    def limit(self, channel) -> int:
        """How many deliveries the channel allows a message (0: no limit)."""
        own = self.overrides.get((channel.topic.name, channel.name))
        if own is not None:
            return own
        if channel.ephemeral or channel.topic.ephemeral or self.is_dead_letter_topic(channel.topic.name):
            return 0
        return self.default_limit

    def set(self, channel, limit: int | None) -> None:
        """The channel's own limit (None: --max-attempts' again)."""
        key = (channel.topic.name, channel.name)
        if limit is None:
            self.overrides.pop(key, None)
        else:
            self.overrides[key] = limit
        self.nsqd.refresh_screen(channel)

    def load(self, channel, extras: dict) -> None:
        if METADATA_KEY in extras:
            self.overrides[(channel.topic.name, channel.name)] = min(extras[METADATA_KEY], MAX_LIMIT)
            self.nsqd.refresh_screen(channel)

    def metadata(self, channel) -> dict:
        own = self.overrides.get((channel.topic.name, channel.name))
        return {} if own is None else {METADATA_KEY: own}

    def forget_channel(self, channel) -> None:
        self.overrides.pop((channel.topic.name, channel.name), None)
        self.counts.pop(channel, None)

    def channel_stats(self, channel) -> dict:
        """/stats keys beyond NSQ's, where a limit applies or letters were moved."""
        if not (self.default_limit or self.overrides or self.counts):  # no limit anywhere: the common case
            return {}
        limit = self.limit(channel)
        if not limit and channel not in self.counts:
            return {}
        return {"max_attempts": limit, "dead_letter_topic": self.topic_name(channel.topic.name),
                "dead_letter_count": self.counts.get(channel, 0)}

    def check_for(self, channel) -> Part | None:
        """The screen part of ``channel`` (nsqd/screen.py), or None without a limit."""
        limit = self.limit(channel)
        if not limit:
            return None

        def exhausted(message: bytes) -> bool:
            if ((message[8] << 8) | message[9]) < limit:
                return False
            return self._divert(channel, message)

        return Part(lambda: exhausted)

    def _divert(self, channel, message: bytes) -> bool:
        """Publish the message to the dead-letter topic; False (deliver it) if it cannot go there."""
        now = time.time_ns()
        letter = envelope(channel, message, now) + memoryview(message)[HEADER_LENGTH:]
        if len(letter) > self.nsqd.opts.max_msg_size:
            log.warning("CHANNEL(%s:%s): message %s delivered %d times is too large for a dead letter; "
                        "delivering it again", channel.topic.name, channel.name,
                        header_id(message).decode("ascii", "replace"), header_attempts(message))
            return False
        name = self.topic_name(channel.topic.name)
        if self.nsqd.removing(name):
            log.warning("CHANNEL(%s:%s): dead-letter topic %s is being deleted; delivering message %s again",
                        channel.topic.name, channel.name, name, header_id(message).decode("ascii", "replace"))
            return False
        try:
            self.nsqd.get_topic(name).publish([letter], now)
        except OSError as exc:
            log.error("CHANNEL(%s:%s): dead-letter topic %s refused a message (%s); delivering it again",
                      channel.topic.name, channel.name, name, exc)
            return False
        self.counts[channel] = self.counts.get(channel, 0) + 1
        return True


def envelope(channel, message: bytes, now_ns: int) -> bytes:
    """The line a dead letter starts with, its newline included."""
    return json.dumps({
        "topic": channel.topic.name,
        "channel": channel.name,
        "id": header_id(message).decode("ascii", "replace"),
        "attempts": header_attempts(message),
        "first_seen": int.from_bytes(message[:8], "big", signed=True),
        "dead_lettered_at": now_ns,
    }, separators=(",", ":")).encode() + b"\n"
