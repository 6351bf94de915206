"""How long consumers take (beyond NSQ: --processing-time-percentile; nsqio/nsq#347).

NSQ's end-to-end latency (--e2e-processing-latency-percentile) runs from the publish to the
FIN, so a backlog and slow consumers look the same in it. Here each channel also keeps the
time from a delivery to its FIN: how long the consumer held the message. With both side by
side an operator sees whether a growing backlog comes from slow processing (processing time
high) or from too few consumers (processing time low, end-to-end latency high).

Per channel, over the same sliding window as NSQ's end-to-end latency
(--e2e-processing-latency-window-time: between half a window and a whole window of samples,
nsqd/quantile.py):

* percentiles of delivery-to-FIN time, from the quantile code of the end-to-end latency
  (within 1/256 of the true value, nearest rank). The delivery time is the one the message's
  in-flight timeout runs from (trio's monotonic clock), so a step of the wall clock changes
  nothing; a TOUCH does not restart it. A message requeued or timed out has no sample;
* how many REQs and timeouts there were in that window, beside the count of FINs.

The delivery time is already kept with each in-flight message (nsqd/message.py), so a FIN
costs one histogram update, and a clock read: one for each run of FINs that came in one read
(Client.finish_many), one for a lone FIN (README "Beyond NSQ" has the measured cost).
"""

import trio

from .quantile import Quantile, merged_result
from .stats import e2e_latency

_EXACT_BELOW = 256  # nsqd/quantile.py's buckets: exact below 256 ns, then 8 significant bits
_SIGNIFICANT_BITS = 8


class ProcessingTime(Quantile):
    """One channel's delivery-to-FIN stream (a Quantile), with the REQs and timeouts counted in the
    same window."""

    __slots__ = ("requeues", "timeouts", "_clock")

    def __init__(self, window_ns: int, percentiles: list[float], clock):
        self._clock = clock  # trio's (trio.current_time() reaches it through a slower lookup)
        now_ns = self._now_ns()
        super().__init__(window_ns, percentiles, now_ns)
        # counted with the same rotation as the FINs: streams whose samples' values are not used
        self.requeues = Quantile(window_ns, [], now_ns)
        self.timeouts = Quantile(window_ns, [], now_ns)

    def now(self) -> float:
        """trio's clock, read once for a run of FINs (``finished``'s ``now``)."""
        return self._clock.current_time()

    def finished(self, delivered_at: float, now: float | None = None) -> None:
        """A FIN of a message delivered at ``delivered_at``, at ``now`` (trio's clock, read here
        if not given): Quantile.insert's bucket, inline and from the clock's float seconds, as
        this runs on every FIN."""
        if now is None:
            now = self._clock.current_time()
        if now * 1e9 > self._rotate_at:
            self._rotate(int(now * 1e9))
        value = int((now - delivered_at) * 1e9)
        if value >= _EXACT_BELOW:
            shift = value.bit_length() - _SIGNIFICANT_BITS
            value = (shift << 7) + (value >> shift)
        current = self._current
        current[value] = current.get(value, 0) + 1

    def requeued(self) -> None:
        now_ns = self._now_ns()
        self.requeues.insert(now_ns, now_ns)

    def timed_out(self) -> None:
        now_ns = self._now_ns()
        self.timeouts.insert(now_ns, now_ns)

    def _now_ns(self) -> int:
        return int(self._clock.current_time() * 1e9)

    def stats(self) -> dict:
        """The channel's ``processing_time`` in /stats: NSQ's quantile.Result shape (values in
        ns) with the window's REQ and timeout counts beside the FIN count."""
        now_ns = self._now_ns()
        return {**e2e_latency([self], now_ns),
                "requeue_count": merged_result([self.requeues], now_ns).count,
                "timeout_count": merged_result([self.timeouts], now_ns).count}


def new_processing_time(opts) -> ProcessingTime | None:
    """A channel's streams, or None when --processing-time-percentile is empty (off)."""
    percentiles = opts.processing_time_percentile
    if not percentiles:
        return None
    return ProcessingTime(round(opts.e2e_processing_latency_window_time * 1e9), percentiles,
                          trio.lowlevel.current_clock())
