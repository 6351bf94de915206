"""nsqd under faults: group commit with --sync-every=1, kill -9 and SIGTERM under load, a lost
nsqlookupd, hostile neighbours, a disk filling up during a burst.

The group commit tests run nsqd in process, to see its sync rounds. They hold rounds open
by holding the worker threads a round's fsyncs need (``nsqd.sync_limiter``, a
trio.CapacityLimiter, which hands a released thread to the first task waiting for one).
The other tests run real nsqd processes.
"""

import itertools
import os
import signal
import socket
import struct
from functools import partial

import httpx
import trio

from common.commands import MAGIC_V2, Fin, Nop, Rdy, Sub

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import Server, dpub, mpub, pub, subscribe, wait_until
from .helpers import RawClient
from .load_helpers import Ledger, consume, drain_all, http_publisher, pipelined_publisher


async def first_publish(nsqd, topic: str) -> None:
    """Create the topic (no channel: messages go to its own disk queue) with one message."""
    client = await RawClient.connect(nsqd.tcp_port)
    await client.send(pub(topic, b"first"))
    assert await client.read_response() == b"OK"
    await client.close()


async def round_begun(nsqd, before) -> None:
    """Wait until the sync loop has begun the round that was upcoming at ``before``."""
    await wait_until(lambda: nsqd.group_commit.upcoming is not before, what="the sync loop's next round begun",
                     interval=0.005)


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
        await trio.sleep(0)  # a checkpoint (the job takes the thread first), not a wait

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


async def test_a_failed_fsync_fails_the_publishes_that_waited_for_it(start_nsqd, tmp_path):
    """A new data file's round also fsyncs the data directory; with the directory moved away
    meanwhile, that fails, and so do the publishes waiting for the round."""
    data = tmp_path / "data"
    data.mkdir()
    nsqd = await start_nsqd(sync_every=1, mem_queue_size=0, data_path=str(data))
    client = await RawClient.connect(nsqd.tcp_port)
    gate = ThreadGate(nsqd)
    await gate.close()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
            async with trio.open_nursery() as nursery:
                upcoming = nsqd.group_commit.upcoming
                await client.send(pub("fresh", b"x") + pub("fresh", b"y"))
                await round_begun(nsqd, upcoming)
                refused = []

                async def http_publish() -> None:
                    refused.append(await http.post("/pub", params={"topic": "fresh2"}, content=b"z"))

                nursery.start_soon(http_publish)
                await wait_until(lambda: "fresh2" in nsqd.topics, what="the HTTP publish written")
                data.rename(tmp_path / "moved")
                gate.open()
                assert await client.read_error() == b"E_PUB_FAILED PUB failed No such file or directory"
                await client.assert_closed()
            assert (refused[0].status_code, refused[0].json()) == (503, {"message": "EXITING"})
            (tmp_path / "moved").rename(data)
            assert (await http.get("/ping")).text.startswith("NOK - ")
            assert (await http.post("/pub", params={"topic": "fresh"}, content=b"again")).status_code == 200
            assert (await http.get("/ping")).text == "OK"
    finally:
        gate.open()


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


TOPIC = "faults"


# -- kill -9 while publishing with --sync-every=1 ----------------------------------------------

async def test_kill_9_while_publishing_loses_no_acknowledged_message(tmp_path):
    """Channel "kept" has no consumer: every acknowledged message is in its disk queue.
    Channel "live" is consumed (RDY 5): a message in flight when nsqd dies is lost, as in
    NSQ, so at most 5 acknowledged messages may be missing there."""
    flags = ("--mem-queue-size=0", "--sync-every=1")
    server = Server(tmp_path, *flags)
    await (await subscribe(server.tcp_port, TOPIC, "kept")).close()
    ledger, received = Ledger(), []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(consume, server.tcp_port, TOPIC, "live", received, rdy=5))
        await wait_until(lambda: "live" in httpx.get(server.http + "/stats").text, what="the live channel")
        for n in range(3):
            nursery.start_soon(pipelined_publisher, server.tcp_port, TOPIC, ledger, b"pub%d" % n)
        nursery.start_soon(partial(pipelined_publisher, server.tcp_port, TOPIC, ledger, b"mpub", window=5, batch=10))
        nursery.start_soon(http_publisher, server.http_port, TOPIC, ledger, b"http")
        await wait_until(lambda: len(ledger.acknowledged) > 1000, timeout=10, what="publishing under way")
        os.kill(server.proc.pid, signal.SIGKILL)
    assert server.proc.wait(timeout=5) == -signal.SIGKILL
    assert not ledger.refused

    server = Server(tmp_path, *flags)
    kept = set(await drain_all(server.tcp_port, TOPIC, "kept"))
    assert ledger.acknowledged <= kept, f"{len(ledger.acknowledged - kept)} acknowledged messages lost"
    live = set(received) | set(await drain_all(server.tcp_port, TOPIC, "live"))
    assert len(ledger.acknowledged - live) <= 5
    assert server.stop() == 0


# -- SIGTERM with 50,000 messages in motion ----------------------------------------------------

async def test_sigterm_with_50000_messages_in_motion_loses_none(tmp_path):
    """Queued in memory, in flight, deferred (REQ with a delay, DPUB), and a publisher still
    publishing when the signal comes: after the restart every acknowledged message is there."""
    flags = ("--mem-queue-size=100000",)
    server = Server(tmp_path, *flags)
    holder = await subscribe(server.tcp_port, TOPIC, "c")
    ledger = Ledger()
    publisher = await RawClient.connect(server.tcp_port)
    queued, deferred = ledger.bodies(b"queued", 48_000), ledger.bodies(b"deferred", 500)
    await publisher.send(b"".join(mpub(TOPIC, queued[n:n + 1000]) for n in range(0, 48_000, 1000)))
    await publisher.send(b"".join(dpub(TOPIC, 60_000, body) for body in deferred))
    for _ in range(48 + 500):
        assert await publisher.read_response() == b"OK"
    ledger.acknowledged.update(queued + deferred)
    await holder.send(b"RDY 2000\n")
    in_flight = [await holder.read_message() for _ in range(2000)]
    await holder.send(b"RDY 0\n" + b"".join(b"REQ %s 60000\n" % message.id for message in in_flight[:500]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(pipelined_publisher, server.tcp_port, TOPIC, ledger, b"live", window=50))
        await wait_until(lambda: len(ledger.acknowledged) > 48_500 + 1000, what="the live publisher under way")
        stats = httpx.get(server.http + "/stats", params={"format": "json", "topic": TOPIC}).json()
        [channel] = stats["topics"][0]["channels"]
        assert channel["in_flight_count"] == 1500 and channel["deferred_count"] == 1000
        assert channel["depth"] > 46_000
        assert server.signal(signal.SIGTERM) == 0
    await holder.assert_closed()

    server = Server(tmp_path, *flags)
    delivered = await drain_all(server.tcp_port, TOPIC)
    assert not ledger.refused
    assert ledger.acknowledged <= set(delivered), f"{len(ledger.acknowledged - set(delivered))} lost"
    assert set(delivered) - ledger.acknowledged <= {body for body in delivered if body.startswith(b"live-")}
    assert server.stop() == 0


# -- clients that stop reading, leave mid-command, flood: nobody else slows down ----------------

async def stuck_consumer(port: int, channel: str) -> trio.SocketStream:
    """SUB with RDY 2500 on a socket with a tiny receive buffer, never read."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", port))
    stream = trio.SocketStream(sock)
    await stream.send_all(MAGIC_V2 + Sub(TOPIC, channel).to_bytes() + Rdy(2500).to_bytes())
    return stream


async def flood_without_reading(port: int, seconds: float) -> None:
    """RDY, FIN (of unknown ids: each answered E_FIN_FAILED) and NOP as fast as nsqd takes them."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    commands = [Rdy(n % 2500).to_bytes() + Fin(b"%016x" % n).to_bytes() + Nop().to_bytes() for n in range(1000)]
    flood = MAGIC_V2 + Sub(TOPIC, "flood").to_bytes() + b"".join(commands)
    with trio.move_on_after(seconds):
        await stream.send_all(flood)
        while True:
            await stream.send_all(b"".join(commands))
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


async def leave_mid_command(port: int, seconds: float) -> int:
    """Connect, send part of an MPUB, go (half with a reset); again and again."""
    half_mpub = mpub(TOPIC, [b"never"] * 50)[:200]
    with trio.move_on_after(seconds):
        for count in itertools.count():
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(MAGIC_V2 + half_mpub)
            if count % 2:
                stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await stream.aclose()
            await trio.sleep(0.01)  # deliberate: churn, not a connection flood


async def test_stuck_and_hostile_clients_slow_neither_other_channels_nor_publishers(tmp_path):
    server = Server(tmp_path)
    body = b"x" * 4096  # 2,500 of these are far more than the stuck consumer's socket buffers hold
    stuck = await stuck_consumer(server.tcp_port, "stuck")
    live: list[bytes] = []
    latencies: list[float] = []
    published = 0

    async def publisher(index: int) -> None:
        nonlocal published
        client = await RawClient.connect(server.tcp_port)
        for batch in range(80):
            started = trio.current_time()
            await client.send(mpub(TOPIC, [b"%d-%d-%d" % (index, batch, n) + body for n in range(20)]))
            assert await client.read_response() == b"OK"
            latencies.append(trio.current_time() - started)
            published += 20
        await client.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume, server.tcp_port, TOPIC, "live", live)
        await wait_until(lambda: "live" in str(httpx.get(server.http + "/stats").text), what="live consumer")
        nursery.start_soon(flood_without_reading, server.tcp_port, 4.0)
        nursery.start_soon(leave_mid_command, server.tcp_port, 4.0)
        started = trio.current_time()
        async with trio.open_nursery() as publishers:
            for index in range(2):
                publishers.start_soon(publisher, index)
        publish_time = trio.current_time() - started
        await wait_until(lambda: len(live) == published, timeout=3, what="the live channel has every message")
        lag = trio.current_time() - started - publish_time
        stats = httpx.get(server.http + "/stats", params={"format": "json", "topic": TOPIC}).json()
        channels = {channel["channel_name"]: channel for channel in stats["topics"][0]["channels"]}
        assert channels["stuck"]["in_flight_count"] == 2500
        assert channels["stuck"]["depth"] == published - 2500  # held for the stuck consumer, nobody waits
        assert httpx.get(server.http + "/ping").text == "OK"
        nursery.cancel_scope.cancel()
    latencies.sort()  # the flood costs nsqd a fraction of a second before it stops reading it
    assert latencies[-1] < 2.0 and latencies[len(latencies) * 9 // 10] < 0.25, latencies
    assert publish_time < 8.0 and lag < 2.0
    assert len(set(live)) == published
    await stuck.aclose()
    assert server.stop() == 0
