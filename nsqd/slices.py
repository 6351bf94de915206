"""Long work on the event loop, in slices, so no client waits behind it.

One event loop serves every client: an answer built over 10,000 topics x 2 channels at once
(``/stats``, ``/metrics``, nsqd.dat) held it for hundreds of milliseconds, and every PUB
waited. Such work is written as a generator that yields between small steps (a topic, a few
hundred lines) and returns its result; ``in_slices`` runs it, letting the loop serve
everyone else (a checkpoint) whenever the loop has run for ``SLICE_SECONDS`` since it last
polled for I/O, and ``at_once`` runs it without a pause, for callers that are not on the loop
or must not be interleaved (start-up, a graceful stop).

The slice is the loop's, shared by every work in slices, not each work's own: trio runs every
task that is ready before it polls again, so two works with a slice each (a pause's nsqd.dat
written by its request while the rewrite a new topic asked for runs) held the loop for two
slices between polls, and a PUB arriving meanwhile waited for both. A trio instrument notes
when the loop comes back from each poll.

While such work runs, CPython's cyclic collector waits (``collector_held``): what it builds
(a dict per topic and per channel: 100,000 containers for 10,000 topics) would otherwise
survive young collections into the older generations and make each of them walk it,
5-17 ms of CPU for a middle collection and 150 ms for a full one, measured with 10,000
topics x 2 channels: a pause no slice can split. Built, sent and dropped, it is freed by
reference counting alone; the collector resumes after, with what others allocated meanwhile.

Between slices the daemon changes: a step looks topics up by name again and skips those
gone, as NSQ's GetStats reads each topic under its own lock, not all of them at one instant.
"""

import contextlib
import gc
import time
from collections.abc import Generator
from typing import TypeVar

import trio

T = TypeVar("T")
Steps = Generator[None, None, T]

SLICE_SECONDS = 0.001


_holders = 0  # the works in slices running now; the collector is held while there is one
_held = False  # whether the collector was held here (not if it was off already)


@contextlib.contextmanager
def collector_held():
    """The cyclic collector does not run inside (unless disabled by others, as it was)."""
    global _holders, _held
    if _holders == 0:
        _held = gc.isenabled()
        gc.disable()
    _holders += 1
    try:
        yield
    finally:
        _holders -= 1
        if _holders == 0 and _held:
            gc.enable()


class _LoopPolls(trio.abc.Instrument):
    """When the event loop last came back from polling for I/O: where the shared slice begins."""

    def __init__(self):
        self.at = time.perf_counter()

    def after_io_wait(self, timeout: float) -> None:
        self.at = time.perf_counter()

    def slice_spent(self) -> bool:
        """Whether the loop has run for SLICE_SECONDS since it last polled for I/O."""
        return time.perf_counter() - self.at >= SLICE_SECONDS


_polls: trio.lowlevel.RunVar = trio.lowlevel.RunVar("slices_loop_polls")


def _loop_polls() -> _LoopPolls:
    """This trio run's instrument, added when a work in slices first runs (an instrument of only
    this hook costs the loop one call a poll)."""
    try:
        return _polls.get()
    except LookupError:
        polls = _LoopPolls()
        trio.lowlevel.add_instrument(polls)
        _polls.set(polls)
        return polls


def slice_spent() -> bool:
    """Whether the loop has run for SLICE_SECONDS since it last polled for I/O."""
    return _loop_polls().slice_spent()


async def in_slices(steps: Steps[T]) -> T:
    """Run ``steps`` to its result, with a checkpoint after any step that ends once the loop has
    run for SLICE_SECONDS since it last polled; at least one step each time the task runs."""
    polls = _loop_polls()
    with collector_held():
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            if polls.slice_spent():
                await trio.sleep(0)


def at_once(steps: Steps[T]) -> T:
    """Run ``steps`` to its result without a pause."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


RELEASE_STEP = 250  # a step frees 0.1-0.7 ms of messages (1,000: up to 3 ms on a busy machine)
RELEASE_REST = 0.001  # seconds between steps of a release: nobody waits for it, so it leaves the CPU to others


async def paced(steps: Steps[T], rest: float) -> T:
    """Run ``steps`` to its result, sleeping ``rest`` after each step: for work nobody waits for, so the
    process is idle between steps and the kernel runs it at once when a client writes."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        await trio.sleep(rest)


def released_steps(items, step: int = RELEASE_STEP) -> Steps[None]:
    """Drop what ``items`` (a deque or list) holds, ``step`` at a time: freeing 1,000,000
    messages at once held the loop for their deallocation."""
    pop = items.pop
    while items:
        for _ in range(min(step, len(items))):
            pop()
        yield
