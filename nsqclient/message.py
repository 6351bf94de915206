"""A message delivered to a Consumer's handler (go-nsq message.go).

``body``, ``id`` (16 ASCII hex bytes), ``attempts`` (1 on first delivery), ``timestamp``
(nanoseconds since the epoch, when it was published) and ``nsqd_address``.

The Consumer finishes a message when the handler returns and requeues it (with backoff)
when the handler raises. A handler may answer itself, at most once per message (later
answers are ignored): ``finish()``, ``requeue(delay=None, backoff=True)``, and ``touch()``
as often as needed to keep a long job from timing out on nsqd. Answers are queued on the
connection and written without waiting; after ``disable_auto_response()`` the Consumer
leaves answering to the handler entirely (e.g. to finish later, from another task).
"""

from common.message import HEADER_LENGTH


class Message:
    __slots__ = ("id", "body", "attempts", "_frame", "_conn", "_responded", "_auto_response")

    def __init__(self, frame: bytes, conn):
        self._frame = frame
        self.attempts = (frame[8] << 8) | frame[9]
        self.id = frame[10:HEADER_LENGTH]
        self.body = frame[HEADER_LENGTH:]
        self._conn = conn
        self._responded = False
        self._auto_response = True

    @property
    def timestamp(self) -> int:
        """When it was published, in nanoseconds since the epoch."""
        return int.from_bytes(self._frame[:8], "big", signed=True)

    @property
    def nsqd_address(self) -> str:
        return self._conn.address

    @property
    def has_responded(self) -> bool:
        return self._responded

    @property
    def is_auto_response_disabled(self) -> bool:
        return not self._auto_response

    def disable_auto_response(self) -> None:
        """The handler will finish or requeue this message itself."""
        self._auto_response = False

    def finish(self) -> None:
        """FIN: processed, nsqd forgets it."""
        if not self._responded:
            self._responded = True
            self._conn.finish(self)

    def requeue(self, delay: float | None = None, backoff: bool = True) -> None:
        """REQ: deliver it again after ``delay`` seconds.

        With no delay: ``default_requeue_delay`` x attempts, at most ``max_requeue_delay``.
        ``backoff`` puts the Consumer in backoff (go-nsq Requeue vs RequeueWithoutBackoff).
        """
        if not self._responded:
            self._responded = True
            self._conn.requeue(self, delay, backoff)

    def touch(self) -> None:
        """TOUCH: restart the message's timeout on nsqd."""
        if not self._responded:
            self._conn.touch(self)

    def __repr__(self) -> str:
        return f"<Message {self.id.decode()} attempts={self.attempts} {len(self.body)} bytes>"
