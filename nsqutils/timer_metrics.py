"""Request timings logged every N requests, as NSQ's nsq_to_http and nsq_to_nsq do with
bitly/timer_metrics: a window of the last N durations, and each time it wraps around the line
``<prefix> finished N - 99th: 1.23ms - 95th: 1.02ms - avg: 0.51ms``. N = 0 disables it."""

import math
import time

from . import golog


def _percentile(percent: float, ordered: list[int]) -> int:
    if not ordered:
        return 0
    index = int(math.ceil(percent / 100.0 * len(ordered) + 0.5))
    return ordered[min(index, len(ordered) - 1)]


class TimerMetrics:
    def __init__(self, status_every: int, prefix: str):
        self.status_every = status_every
        self.prefix = prefix
        self.timings: list[int] = []
        self.position = 0
        if 0 < status_every < 100:
            golog.printf(f"Warning: use more than 100 status values for accurate percentiles "
                         f"(configured with {status_every})")

    def status(self, started_ns: int) -> None:
        """Record the time since ``started_ns`` (time.monotonic_ns())."""
        if self.status_every == 0:
            return
        self.position += 1
        looped = self.position > self.status_every
        if looped:
            self.position = 1
        duration = time.monotonic_ns() - started_ns
        if self.position > len(self.timings):
            self.timings.append(duration)
        else:
            self.timings[self.position - 1] = duration
        if looped:
            golog.printf(self.line())

    def line(self) -> str:
        ordered = sorted(self.timings)
        average = sum(ordered) // len(ordered) if ordered else 0
        return (f"{self.prefix} finished {len(ordered)} - 99th: {_percentile(99.0, ordered) / 1e6:.2f}ms - "
                f"95th: {_percentile(95.0, ordered) / 1e6:.2f}ms - avg: {average / 1e6:.2f}ms")


def address_metrics(addresses: list[str], status_every: int) -> dict[str, TimerMetrics]:
    """One per address, disabled when there is only one (the aggregate says it all)."""
    if len(addresses) == 1:
        return {addresses[0]: TimerMetrics(0, "")}
    return {address: TimerMetrics(status_every, f"[{address}]:") for address in addresses}
