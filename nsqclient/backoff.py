"""Consumer-wide backoff and reconnect delays (go-nsq consumer.go startStopContinueBackoff,
config.go ExponentialStrategy / FullJitterStrategy).

Theory of operation: every answer to a message is a signal. FIN is *success*, REQ with
backoff a *failure*, REQ without backoff *continue*. A failure raises the backoff level by one
(unless the next level's duration would pass ``max_backoff_duration``); a success lowers it
by one. While the level is above zero the Consumer backs off: RDY 0 on every connection for
the level's duration, then RDY 1 on one connection chosen at random to test the water; the
answer to that message moves the level again. Signals that arrive while a backoff timeout
runs are ignored, so a burst of failures in flight counts once. When a success brings the
level back to zero, every connection gets its share of ``max_in_flight`` again.
"""

import random
from enum import Enum
from typing import Callable


class Signal(Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    CONTINUE = "continue"


EXIT = "exit"


def strategy(name: str, multiplier: float, rng: random.Random) -> Callable[[int], float]:
    """Seconds to back off at a level: ``multiplier * 2**level``, or a random part of it (full jitter)."""
    if name == "full_jitter":
        return lambda level: rng.random() * multiplier * 2**level
    return lambda level: multiplier * 2**level


class BackoffState:
    """The backoff level, and whether a backoff timeout is running."""

    def __init__(self, duration_at: Callable[[int], float], max_duration: float):
        self._duration_at = duration_at
        self._max_duration = max_duration
        self.level = 0
        self.in_timeout = False

    @property
    def in_backoff(self) -> bool:
        return self.level > 0

    def update(self, signal: Signal) -> float | str | None:
        """What the Consumer must do: None (nothing), EXIT (all RDY back), or back off this many seconds."""
        if self.in_timeout:
            return None
        updated = False
        if signal is Signal.SUCCESS and self.level > 0:
            self.level -= 1
            updated = True
        elif signal is Signal.FAILURE and self._duration_at(self.level + 1) <= self._max_duration:
            self.level += 1
            updated = True
        if self.level == 0:
            return EXIT if updated else None
        return min(self._duration_at(self.level), self._max_duration)


def reconnect_delay(attempt: int, interval: float) -> float:
    """Seconds before reconnect ``attempt`` (0, 1, ...) to an nsqd given directly: 1 s doubling,
    never above ``lookupd_poll_interval`` (go-nsq waits that interval every time)."""
    return min(interval, 2.0**attempt)
