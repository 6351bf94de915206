"""A message as nsqd holds it, and one delivery of it.

A queued message is one ``bytes`` object in NSQ's encoding (common/message.py):
timestamp, attempts (its deliveries so far), ID, body. It is made once, when the topic
accepts the publish, and that object is shared by every channel of the topic, written to
the disk queue as it is (it is go-diskqueue's record) and read back as one. A delivery
frames it with its attempts plus one (nsqd/client.py); a message that comes back (REQ, a
timeout, a client that left) is queued as a new object with those attempts.

One object instead of a (header, body) pair: a 100-byte message takes one 160-byte block
of pymalloc instead of 64 + 144, and one deque slot instead of two.
"""

from itertools import repeat

from common.message import TIMESTAMP_ATTEMPTS, header_attempts, with_attempts


def new_messages(guid, timestamp_ns: int, bodies: list[bytes]) -> list[bytes]:
    """Published ``bodies`` as messages: fresh IDs, attempts 0, each made in one allocation
    (one join of three parts: the header to the ID's sequence, which the run of IDs shares;
    the sequence's 3 hex digits; the body), a quarter of what formatting each one cost."""
    prefix = TIMESTAMP_ATTEMPTS.pack(timestamp_ns, 0)
    messages: list[bytes] = []
    rest = iter(bodies)
    for high, sequences in guid.new_id_runs(len(bodies)):
        # zip stops at the run's last sequence before it takes a body from ``rest``
        messages += map(b"".join, zip(repeat(prefix + high), sequences, rest))
    return messages


class InFlight:
    """One delivery of a message: the message as it was queued, and until when it may stay out."""

    __slots__ = ("message", "deadline", "delivered_at")

    def __init__(self, message: bytes, deadline: float, delivered_at: float):
        self.message = message
        self.deadline = deadline
        self.delivered_at = delivered_at

    def extend(self, deadline: float) -> None:
        """TOUCH: it may stay out until ``deadline`` now."""
        self.deadline = deadline

    @property
    def attempts(self) -> int:
        """Deliveries so far, this one included."""
        return header_attempts(self.message) + 1

    def requeued(self) -> bytes:
        """The message to queue again: same timestamp, ID and body, attempts so far."""
        return with_attempts(self.message, self.attempts)
