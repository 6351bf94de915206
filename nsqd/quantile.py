"""Streaming quantiles of end-to-end processing latency over a sliding window
(NSQ's internal/quantile). Pure: every call is given the current time.

Like NSQ, a stream is two half-window parts: samples go into the current part; once it
is half a window old, the older part is dropped and a new current part starts. A query
sees both parts, so it covers between half a window and a whole window of samples. A
topic's latency is the merge of its channels' streams.

NSQ keeps each part in a perks CKMS "targeted quantiles" summary. Here each part is a
log-linear histogram (HDR histogram style), which is exact in rank and cheap to update:

* a sample under 256 ns is counted exactly; a larger one in a bucket 1/128 to 1/256 of
  its value wide (8 significant bits);
* counts are exact, so a query finds the bucket of the ceil(q * n)-th smallest sample
  (the nearest-rank quantile, perks' exact rule) and answers that bucket's midpoint:
  **within 1/256 (0.39 %) of that sample's true value**, whatever the distribution;
* memory is one dict entry per bucket in use, at most 128 per power of two of
  nanoseconds (about 7,300 for the whole int64 range, tens to hundreds in practice),
  however many samples arrive;
* an insert is a handful of integer operations and one dict update.
"""

import math
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate

SIGNIFICANT_BITS = 8
_EXACT_BELOW = 1 << SIGNIFICANT_BITS
_MANTISSA_BITS = SIGNIFICANT_BITS - 1


def bucket_value(key: int) -> int:
    """The value a bucket key (see ``Quantile.insert``) stands for: its midpoint, or
    the value itself below 256."""
    if key < _EXACT_BELOW:
        return key
    shift = (key >> _MANTISSA_BITS) - 1
    low = (key - (shift << _MANTISSA_BITS)) << shift
    return low + (1 << shift >> 1)


@dataclass(frozen=True)
class Result:
    """Samples in the window and the value at each requested quantile, in ns."""

    count: int
    percentiles: list[tuple[float, int]]


class Quantile:
    """One channel's latency stream: ``insert`` on FIN; ``merged_result`` reads it for /stats."""

    __slots__ = ("percentiles", "_half_window", "_rotate_at", "_previous", "_current")

    def __init__(self, window_ns: int, percentiles: list[float], now_ns: int):
        self.percentiles = percentiles
        self._half_window = max(1, window_ns // 2)
        self._rotate_at = now_ns + self._half_window
        self._previous: dict[int, int] = {}
        self._current: dict[int, int] = {}

    def insert(self, start_ns: int, now_ns: int) -> None:
        """Count one message that was published at ``start_ns`` and finished at ``now_ns``."""
        if now_ns > self._rotate_at:
            self._rotate(now_ns)
        value = now_ns - start_ns
        if value >= _EXACT_BELOW:
            # value >> shift is in [128, 256): key = shift * 128 + that, so keys grow with values
            shift = value.bit_length() - SIGNIFICANT_BITS
            value = (shift << _MANTISSA_BITS) + (value >> shift)
        elif value < 0:  # the wall clock stepped back since the publish
            value = 0
        current = self._current
        current[value] = current.get(value, 0) + 1

    def _rotate(self, now_ns: int) -> None:
        """Move the window on to cover ``now_ns`` (NSQ's moveWindow, repeated while stale)."""
        steps = -((self._rotate_at - now_ns) // self._half_window)
        self._previous = self._current if steps == 1 else {}
        self._current = {}
        self._rotate_at += steps * self._half_window

    def parts(self, now_ns: int) -> tuple[dict[int, int], dict[int, int]]:
        """The bucket counts of both halves of the window that ends at ``now_ns``."""
        if now_ns > self._rotate_at:
            self._rotate(now_ns)
        return self._previous, self._current


def merged_result(streams: list[Quantile], now_ns: int) -> Result:
    """The quantiles of every sample in ``streams`` (all configured alike), as one stream."""
    counts: dict[int, int] = {}
    for stream in streams:
        for part in stream.parts(now_ns):
            for key, count in part.items():
                counts[key] = counts.get(key, 0) + count
    keys = sorted(counts)
    cumulative = list(accumulate(counts[key] for key in keys))
    total = cumulative[-1] if cumulative else 0
    values = []
    for quantile in streams[0].percentiles:
        if not total:
            values.append(0)  # perks answers 0 for an empty stream
            continue
        rank = max(1, math.ceil(total * quantile))
        values.append(bucket_value(keys[bisect_left(cumulative, rank)]))
    return Result(total, list(zip(streams[0].percentiles, values)))
