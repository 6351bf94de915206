"""Turns on the event loop (nsqd/turns.py): tasks made ready together do their work a few a round,
with a poll for I/O between rounds; a task that finds the loop idle goes on at once. And a TLS
connection's socket reads take a turn before TLS gets what they read (nsqd/stream_backend.py)."""

import time

import pytest
import trio
import trio.testing

from nsqd.slices import SLICE_SECONDS
from nsqd.stream_backend import TurnTakingStream
from nsqd.turns import TURNS_A_ROUND, Turns

TASKS = 40
WORK = SLICE_SECONDS / 4


class WorkBetweenPolls(trio.abc.Instrument):
    """How many tasks did their work between two polls of the loop for I/O, poll by poll."""

    def __init__(self):
        self.counts = [0]

    def after_io_wait(self, timeout: float) -> None:
        self.counts.append(0)

    def work(self) -> None:
        end = time.perf_counter() + WORK
        while time.perf_counter() < end:
            pass
        self.counts[-1] += 1


async def burst(take) -> list[int]:
    """TASKS tasks made ready in one round, each taking a turn and then working a quarter slice."""
    polls = WorkBetweenPolls()
    go = trio.Event()

    async def one() -> None:
        await go.wait()
        await take()
        polls.work()

    async with trio.open_nursery() as nursery:
        for _ in range(TASKS):
            nursery.start_soon(one)
        await trio.testing.wait_all_tasks_blocked()
        trio.lowlevel.add_instrument(polls)
        try:
            go.set()  # every task is ready in the next round
            await trio.testing.wait_all_tasks_blocked()
        finally:
            trio.lowlevel.remove_instrument(polls)
    return polls.counts


async def test_tasks_ready_together_work_a_few_a_round_with_polls_between():
    turns = Turns()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(turns.run)
        counts = await burst(turns.take)
        nursery.cancel_scope.cancel()
    assert sum(counts) == TASKS
    # a slice's worth of quarter-slice steps, plus the one that found it spent; then the keeper's
    # few a round. Work only takes longer on a busy machine, so the bound holds there too
    assert max(counts) <= max(5, TURNS_A_ROUND), counts


async def test_without_turns_the_whole_burst_runs_between_two_polls():
    """The measurement above can fail: with no turn to take, all of them run in one round."""
    async def no_turn() -> None:
        pass

    counts = await burst(no_turn)
    assert max(counts) == TASKS, counts


async def test_a_turn_on_an_idle_loop_is_taken_at_once_without_the_keeper():
    turns = Turns()  # no keeper runs: a task that parked would never go on
    await trio.sleep(0)  # a fresh round: the loop has just polled
    with trio.fail_after(5):
        await turns.take()


async def test_a_tls_sockets_reads_pass_through_their_turn():
    turns = Turns()
    client, server = trio.testing.memory_stream_pair()
    stream = TurnTakingStream(server, turns)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(turns.run)
        await client.send_all(b"IDENTIFY")
        assert await stream.receive_some(100) == b"IDENTIFY"
        await stream.send_all(b"OK")
        assert await client.receive_some(100) == b"OK"
        await client.aclose()
        assert await stream.receive_some(100) == b""
        await stream.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await stream.receive_some(100)
        nursery.cancel_scope.cancel()


async def test_a_reset_tls_socket_still_raises_after_its_turn():
    class Reset(trio.abc.Stream):
        async def send_all(self, data) -> None:
            pass

        async def wait_send_all_might_not_block(self) -> None:
            pass

        async def receive_some(self, max_bytes=None) -> bytes:
            raise trio.BrokenResourceError("connection reset by peer")

        async def aclose(self) -> None:
            pass

    stream = TurnTakingStream(Reset(), Turns())
    with pytest.raises(trio.BrokenResourceError):
        await stream.receive_some(100)
