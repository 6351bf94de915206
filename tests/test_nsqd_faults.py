"""nsqd under faults: group commit with --sync-every=1, kill -9 and SIGTERM under load, a lost
nsqlookupd, hostile neighbours, a disk filling up during a burst.

The group commit tests run nsqd in process, to see its sync rounds. They hold rounds open
by holding the worker threads a round's fsyncs need (``nsqd.sync_limiter``, a
trio.CapacityLimiter, which hands a released thread to the first task waiting for one).
The other tests run real nsqd processes.
"""

import httpx
import trio

from .datadir import mpub, pub
from .helpers import RawClient


async def first_publish(nsqd, topic: str) -> None:
    """Create the topic (no channel: messages go to its own disk queue) with one message."""
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(pub(topic, b"first"))
    assert await client.read_response() == b"OK"
    await client.close()


async def round_begun(nsqd, before) -> None:
    """Wait until the sync loop has begun the round that was upcoming at ``before``."""
    with trio.fail_after(5):
        while nsqd.group_commit.upcoming is before:
            await trio.sleep(0.005)


class ThreadGate:
    """Holds every fsync worker thread of an in-process nsqd, so no round can complete."""

    def __init__(self, nsqd):
        self.limiter = nsqd.sync_limiter
        self.holders = [object() for _ in range(int(self.limiter.total_tokens))]

    async def close(self) -> None:
        for holder in self.holders:
            await self.limiter.acquire_on_behalf_of(holder)

    async def let_one_job_through(self, nursery) -> None:
        """Give a thread to the job waiting for one, and take it back right after it (FIFO)."""
        holder = self.holders[0]
        self.limiter.release_on_behalf_of(holder)
        nursery.start_soon(self.limiter.acquire_on_behalf_of, holder)
        await trio.sleep(0)

    def open(self) -> None:
        borrowers = self.limiter.statistics().borrowers
        for holder in self.holders:
            if holder in borrowers:
                self.limiter.release_on_behalf_of(holder)


# -- --sync-every=1: answers wait for an fsync that began after the write ----------------------

async def test_publish_is_answered_only_after_a_round_that_began_after_its_write(start_nsqd):
    nsqd = await start_nsqd(sync_every=1, mem_queue_size=0)
    await first_publish(nsqd, "one")
    await first_publish(nsqd, "two")
    first = await RawClient.connect(nsqd.tcp_port)
    second = await RawClient.connect(nsqd.tcp_port)
    third = await RawClient.connect(nsqd.tcp_port)
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}")
    answered_at: dict[str, int] = {}

    async def http_publish(path: str, topic: str, body: bytes) -> None:
        response = await http.post(path, params={"topic": topic}, content=body)
        assert response.status_code == 200 and response.text == "OK"
        answered_at[path] = nsqd.group_commit.rounds

    gate = ThreadGate(nsqd)
    await gate.close()
    try:
        async with trio.open_nursery() as nursery:
            upcoming = nsqd.group_commit.upcoming
            await first.send(pub("one", b"w0"))  # round r begins: its fsync waits for a thread
            await round_begun(nsqd, upcoming)
            completed = nsqd.group_commit.rounds
            await second.send(pub("two", b"w1") + mpub("two", [b"w2", b"w3"]))  # written during round r
            nursery.start_soon(http_publish, "/pub", "two", b"w4")
            nursery.start_soon(http_publish, "/mpub", "two", b"w5\nw6")
            await first.assert_no_frame(0.3)
            await second.assert_no_frame(0.01)
            assert answered_at == {}
            # a message that stays in memory (deferred) is answered at once
            await third.send(b"DPUB one 60000\n\x00\x00\x00\x02dp")
            assert await third.read_response() == b"OK"

            await gate.let_one_job_through(nursery)  # round r's fsync, then the gate is shut again
            assert await first.read_response() == b"OK"
            assert nsqd.group_commit.rounds == completed + 1
            # w1..w6 wait for round r+1, which has begun and shares one fsync among them
            await second.assert_no_frame(0.3)
            assert answered_at == {}
            gate.open()
            assert [await second.read_response() for _ in range(2)] == [b"OK", b"OK"]
            assert nsqd.group_commit.rounds >= completed + 2
    finally:
        gate.open()
    assert answered_at.keys() == {"/pub", "/mpub"} and min(answered_at.values()) >= completed + 2
    await http.aclose()


async def test_pipelined_publishes_share_fsyncs_and_answers_keep_their_order(start_nsqd):
    nsqd = await start_nsqd(sync_every=1, mem_queue_size=0)
    await first_publish(nsqd, "piped")
    client = await RawClient.connect(nsqd.tcp_port)
    rounds = nsqd.group_commit.rounds
    count = 2000
    await client.send(b"".join(pub("piped", b"m%d" % n) for n in range(count)))
    for _ in range(count):
        assert await client.read_response() == b"OK"
    assert nsqd.group_commit.rounds - rounds < count / 10
    assert nsqd.topics["piped"].queue.backend.depth == count + 1

    # an error comes after the held answers of the publishes sent before it
    await client.send(b"".join(pub("piped", b"e%d" % n) for n in range(50)) + b"FIN 0123456789abcdef\n")
    for _ in range(50):
        assert await client.read_response() == b"OK"
    assert (await client.read_error()).startswith(b"E_INVALID")
    await client.assert_closed()


async def test_default_sync_every_answers_without_waiting(start_nsqd):
    nsqd = await start_nsqd(mem_queue_size=0, sync_every=2)
    await first_publish(nsqd, "quick")
    gate = ThreadGate(nsqd)
    await gate.close()
    try:
        client = await RawClient.connect(nsqd.tcp_port)
        await client.send(pub("quick", b"x") * 5)  # rounds are due, and cannot run
        for _ in range(5):
            assert await client.read_response() == b"OK"
    finally:
        gate.open()
    assert nsqd.topics["quick"].queue.backend.depth == 6
