"""When each channel's deferred messages are due, kept by one task for all of nsqd.

A channel keeps its deferred messages (REQ with a delay, DPUB) in a heap ordered by deadline
(nsqd/channel.py); nsqd's queueScanLoop looks at them every 100 ms (nsqd/nsqd.go). Here each
channel tells this timer when its earliest one is due, and one task sleeps until the earliest
of those and has each channel that is due release its messages (``Channel.release_due``,
exactly at their deadline, never early), which says when the channel is due next. Kept by a
task of each channel's own, the deferrals cost every channel a task, a cancel scope and an event
(~3 KiB), idle or not: 10,000 topics x 2 channels held 60 MiB for nothing.

Entries are dropped lazily, as in nsqd/heartbeats.py: a heap entry holds a :class:`Wake`, never
the channel itself; a sooner deadline or a deleted channel empties the channel's wake, so the
stale entry is skipped when it falls due and a deleted channel is freed at once.
"""

import heapq
import itertools
import math

import trio


class Wake:
    """A channel's next wake-up: the heap's entry refers to it, the channel to nothing else."""

    __slots__ = ("channel", "deadline")

    def __init__(self, channel, deadline: float):
        self.channel = channel
        self.deadline = deadline


class DeferredTimer:
    def __init__(self):
        self._heap: list[tuple[float, int, Wake]] = []
        self._order = itertools.count()
        self._wakes: dict[object, Wake] = {}  # channel -> its current wake
        self._changed = trio.Event()

    def wake_at(self, channel, deadline: float) -> None:
        """``channel`` has a deferred message due at ``deadline``: wake it then, unless sooner."""
        wake = self._wakes.get(channel)
        if wake is not None:
            if wake.deadline <= deadline:
                return
            wake.channel = None
        wake = self._wakes[channel] = Wake(channel, deadline)
        if not self._heap or deadline < self._heap[0][0]:
            self._changed.set()
        heapq.heappush(self._heap, (deadline, next(self._order), wake))

    def forget(self, channel) -> None:
        """The channel was deleted: never wake it again."""
        wake = self._wakes.pop(channel, None)
        if wake is not None:
            wake.channel = None

    async def run(self) -> None:
        heap = self._heap
        while True:
            self._changed = trio.Event()
            earliest = heap[0][0] if heap else math.inf
            if earliest > trio.current_time():
                with trio.move_on_at(earliest):
                    await self._changed.wait()
                continue
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                channel = heapq.heappop(heap)[2].channel
                if channel is not None:
                    del self._wakes[channel]
                    next_due = channel.release_due(now)
                    if next_due < math.inf:
                        self.wake_at(channel, next_due)
