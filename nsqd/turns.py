"""Turns: work that comes in a burst goes onto the event loop a few tasks a round.

Theory of operation. trio runs every task that is ready before it polls for I/O again. Clients
that connect together (200 TLS clients at once: a deploy, a restart of their consumers) make
their connections' tasks ready together at each stage of their start: the handlers the
listener starts, then the IDENTIFYs the poller hands back to their tasks (each asks for its
TLS upgrade, ~50 us a task), then the writers that answer them. Each stage was one round of
the loop of 100-200 short steps, and a PUB that arrived meanwhile waited for the whole round:
13-20 ms in the loop trace of ``bench/bench_stalls.py``'s 200 TLS clients. A checkpoint in each
such task did not help: every one of them ran again in the next round, only to check.

So a task about to start such a step takes a turn first (``take``): it goes on at once when
nobody is waiting for a turn and the loop's slice (nsqd/slices.py) has time left, the common
case, at the cost of a clock read; else it parks, costing the loop nothing until its turn.
The turn keeper (``run``, one task for nsqd) lets TURNS_A_ROUND parked tasks go each round of
the loop, oldest first. The connection whose PUB arrives meanwhile is read in the round's poll
(nsqd/epoll_backend.py) and waits for at most those few steps. What a task let go starts next
(its writer's answer, its handshake) becomes ready a few tasks at a time in turn.
"""

import trio

from .slices import slice_spent

TURNS_A_ROUND = 4  # the tasks let go in a round: ~50-130 us of work each in the trace above


class Turns:
    def __init__(self):
        self._waiting = trio.lowlevel.ParkingLot()
        self._someone_waits = trio.Event()

    async def take(self) -> None:
        """Return when it is this task's turn: at once (no checkpoint) unless the loop is busy."""
        if not self._waiting and not slice_spent():
            return
        self._someone_waits.set()
        await self._waiting.park()

    async def run(self) -> None:
        """The turn keeper: a few parked tasks a round, for as long as nsqd runs."""
        while True:
            await self._someone_waits.wait()
            self._someone_waits = trio.Event()
            while self._waiting:
                await trio.sleep(0)  # one round of the loop, and its poll, between turns
                self._waiting.unpark(count=TURNS_A_ROUND)
