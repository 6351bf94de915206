"""A message in flight to one client (the queued form is a bare (header, body) pair)."""

from common.message import with_attempts


class InFlight:
    """One delivery of a message: who holds it and until when."""

    __slots__ = ("id", "header", "body", "attempts", "deadline", "delivered_at")

    def __init__(self, msg_id: bytes, header: bytes, body: bytes, attempts: int, deadline: float, delivered_at: float):
        self.id = msg_id
        self.header = header
        self.body = body
        self.attempts = attempts
        self.deadline = deadline
        self.delivered_at = delivered_at

    def requeue_header(self) -> bytes:
        """The header to queue again: same timestamp and ID, attempts so far."""
        return with_attempts(self.header, self.attempts)
