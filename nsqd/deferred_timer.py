"""When each channel's deferred messages are due, kept by one task for all of nsqd.

A channel keeps its deferred messages (REQ with a delay, DPUB) in a heap ordered by deadline
(nsqd/channel.py); nsqd's queueScanLoop looks at them every 100 ms (nsqd/nsqd.go). Here each
channel tells this timer when its earliest one is due, and one task (nsqd/wake_scheduler.py,
with no slack) sleeps until the earliest of those and has each channel that is due release its
messages (``Channel.release_due``, exactly at their deadline, never early), which says when the
channel is due next. Kept by a task of each channel's own, the deferrals cost every channel a
task, a cancel scope and an event (~3 KiB), idle or not: 10,000 topics x 2 channels held 60 MiB
for nothing. A deleted channel is forgotten, and freed at once.
"""

import math

from .wake_scheduler import WakeScheduler


class DeferredTimer:
    def __init__(self):
        self._scheduler = WakeScheduler(self._release)
        self.run = self._scheduler.run

    def wake_at(self, channel, deadline: float) -> None:
        """``channel`` has a deferred message due at ``deadline``: wake it then, unless sooner."""
        self._scheduler.wake_at(channel, deadline)

    def forget(self, channel) -> None:
        """The channel was deleted: never wake it again."""
        self._scheduler.forget(channel)

    def _release(self, channels: list, now: float) -> None:
        for channel in channels:
            next_due = channel.release_due(now)
            if next_due < math.inf:
                self._scheduler.wake_at(channel, next_due)
