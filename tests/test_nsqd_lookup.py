"""nsqd's lookupLoop against a real nsqlookupd: every process real, talking over loopback."""

import itertools
import signal
import socket

import httpx
import pytest
import trio

from nsqclient.consumer import Consumer

from .datadir import Server, kill_leftover_servers, mpub, publish, subscribe  # noqa: F401 (fixture)
from .helpers import RawClient
from .lookupd_helpers import LookupdProcess
from .waiting import await_until as wait_for
from .waiting import wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def lookupd():
    proc = LookupdProcess("--tombstone-lifetime=2s")
    yield proc
    proc.stop()


@pytest.fixture
def impatient_lookupd():
    """Hides producers that have not pinged for 5 s (nsqd pings every 15 s): the test's steps after
    a REGISTER must fit in those 5 s (2 s did not at a load of 20)."""
    proc = LookupdProcess("--inactive-producer-timeout=5s")
    yield proc
    proc.stop()


def start_nsqd(tmp_path, name: str, *lookupd_ports: int) -> Server:
    data = tmp_path / name
    data.mkdir()
    flags = [f"--lookupd-tcp-address=127.0.0.1:{port}" for port in lookupd_ports]
    return Server(data, "--broadcast-address=127.0.0.1", *flags)


async def lookup(lookupd_http_port: int, topic: str) -> dict | None:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://127.0.0.1:{lookupd_http_port}/lookup", params={"topic": topic})
    return response.json() if response.status_code == 200 else None


def producer_ports(answer: dict | None) -> set[int]:
    return {producer["tcp_port"] for producer in (answer or {}).get("producers", [])}


async def nodes(lookupd_http_port: int) -> set[int]:
    """The TCP ports of the nsqd nsqlookupd knows (connected and identified, topics or not)."""
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://127.0.0.1:{lookupd_http_port}/nodes")
    return {producer["tcp_port"] for producer in response.json()["producers"]}


async def wait_identified(lookupd, *servers: Server) -> None:
    # a failure bound only: two nsqd starting at a load of 20 took more than 10 s
    await wait_for(lambda: _equals(lambda: nodes(lookupd.http_port), {s.tcp_port for s in servers}), 30,
                   "every nsqd connected to nsqlookupd and identified")


async def test_topic_and_channel_are_registered_as_they_appear(tmp_path, lookupd):
    first = start_nsqd(tmp_path, "n1", lookupd.tcp_port)
    second = start_nsqd(tmp_path, "n2", lookupd.tcp_port)
    await wait_identified(lookupd, first, second)
    await publish(first.tcp_port, "orders", [b"one"])
    await publish(second.tcp_port, "orders", [b"two"])

    async def both_registered():
        return producer_ports(await lookup(lookupd.http_port, "orders")) == {first.tcp_port, second.tcp_port}

    # at once: well within the 15 s between the PINGs, the only other time nsqd talks to nsqlookupd
    await wait_for(both_registered, 5.0, "topic registered by both nsqd")
    consumer = await subscribe(first.tcp_port, "orders", "billing")

    async def channel_listed():
        answer = await lookup(lookupd.http_port, "orders")
        return answer and "billing" in answer["channels"]

    await wait_for(channel_listed, 5.0, "channel registered after SUB")
    await consumer.close()


async def test_killed_nsqd_vanishes_and_a_silent_one_is_hidden_after_the_inactive_timeout(tmp_path,
                                                                                           impatient_lookupd):
    lookupd = impatient_lookupd
    killed = start_nsqd(tmp_path, "killed", lookupd.tcp_port)
    stopped = start_nsqd(tmp_path, "stopped", lookupd.tcp_port)
    await wait_identified(lookupd, killed, stopped)
    await publish(killed.tcp_port, "t", [b"x"])
    await publish(stopped.tcp_port, "t", [b"x"])

    async def ports():
        return producer_ports(await lookup(lookupd.http_port, "t"))

    await wait_for(lambda: _equals(ports, {killed.tcp_port, stopped.tcp_port}), 5, "both registered")
    killed.kill()
    await wait_for(lambda: _equals(ports, {stopped.tcp_port}), 5, "SIGKILLed nsqd gone")
    stopped.proc.send_signal(signal.SIGSTOP)  # connected, but no more PINGs
    try:
        await wait_for(lambda: _equals(ports, set()), 10, "silent nsqd hidden after --inactive-producer-timeout")
    finally:
        stopped.proc.send_signal(signal.SIGCONT)


async def _equals(check, expected) -> bool:
    return await check() == expected


async def test_restarted_lookupd_gets_every_registration_back(tmp_path):
    tcp_port = free_port()
    lookupd = LookupdProcess(f"--tcp-address=127.0.0.1:{tcp_port}")
    first = start_nsqd(tmp_path, "n1", tcp_port)
    second = start_nsqd(tmp_path, "n2", tcp_port)
    await wait_identified(lookupd, first, second)
    await publish(first.tcp_port, "a", [b"x"])
    held = await subscribe(second.tcp_port, "b", "c")

    async def everything_registered():
        a, b = await lookup(lookupd.http_port, "a"), await lookup(lookupd.http_port, "b")
        return (producer_ports(a) == {first.tcp_port} and producer_ports(b) == {second.tcp_port}
                and b["channels"] == ["c"])

    await wait_for(everything_registered, 5, "registrations before the lookupd restart")
    assert lookupd.stop() == 0
    lookupd = LookupdProcess(f"--tcp-address=127.0.0.1:{tcp_port}")
    try:
        await wait_for(everything_registered, 10, "registrations back after the lookupd restart")
    finally:
        await held.close()
        lookupd.stop()


async def test_tombstone_hides_a_producer_for_the_tombstone_lifetime(tmp_path, lookupd):
    first = start_nsqd(tmp_path, "n1", lookupd.tcp_port)
    second = start_nsqd(tmp_path, "n2", lookupd.tcp_port)
    await wait_identified(lookupd, first, second)
    await publish(first.tcp_port, "t", [b"x"])
    await publish(second.tcp_port, "t", [b"x"])

    async def ports():
        return producer_ports(await lookup(lookupd.http_port, "t"))

    await wait_for(lambda: _equals(ports, {first.tcp_port, second.tcp_port}), 2, "both registered")
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"http://127.0.0.1:{lookupd.http_port}/topic/tombstone",
                                 params={"topic": "t", "node": f"127.0.0.1:{first.http_port}"})
    assert answer.status_code == 200
    tombstoned_at = trio.current_time()
    assert await ports() == {second.tcp_port}
    await wait_for(lambda: _equals(ports, {first.tcp_port, second.tcp_port}), 4, "back after the lifetime")
    assert trio.current_time() - tombstoned_at >= 1.8


async def test_config_put_changes_the_lookupd_set_at_run_time(tmp_path, lookupd):
    nsqd = start_nsqd(tmp_path, "n1")
    await publish(nsqd.tcp_port, "late", [b"x"])
    url = f"{nsqd.http}/config/nsqlookupd_tcp_addresses"
    async with httpx.AsyncClient() as http:
        assert (await http.get(url)).json() == []
        answer = await http.put(url, content=f'["127.0.0.1:{lookupd.tcp_port}"]')
        assert answer.json() == [f"127.0.0.1:{lookupd.tcp_port}"]

        async def registered():
            return producer_ports(await lookup(lookupd.http_port, "late")) == {nsqd.tcp_port}

        await wait_for(registered, 2, "registered after PUT")
        assert (await http.put(url, content="[]")).json() == []
        assert (await http.put(url, content='["no-port"]')).status_code == 400

        async def gone():
            return producer_ports(await lookup(lookupd.http_port, "late")) == set()

        await wait_for(gone, 2, "unregistered after PUT []")


async def test_new_topic_gets_the_channels_the_cluster_knows_before_any_message(tmp_path, lookupd):
    first = start_nsqd(tmp_path, "n1", lookupd.tcp_port)
    second = start_nsqd(tmp_path, "n2", lookupd.tcp_port)
    await wait_identified(lookupd, first, second)
    consumer = await subscribe(second.tcp_port, "events", "archive")

    async def channel_listed():
        answer = await lookup(lookupd.http_port, "events")
        return answer and answer["channels"] == ["archive"]

    await wait_for(channel_listed, 5, "the channel registered by the second nsqd")
    await publish(first.tcp_port, "events", [b"first message"])
    async with httpx.AsyncClient() as http:
        async def channel_has_message():
            stats = (await http.get(f"{first.http}/stats", params={"format": "json", "topic": "events"})).json()
            channels = (stats["topics"] or [{}])[0].get("channels", [])
            return [(ch["channel_name"], ch["depth"]) for ch in channels] == [("archive", 1)]

        await wait_for(channel_has_message, 2, "the first message queued in the pre-created channel")
    await consumer.close()


def test_pynsq_reader_discovers_both_nsqd_through_lookupd(tmp_path, lookupd):
    import asyncio

    import nsq
    import tornado.ioloop

    first = start_nsqd(tmp_path, "n1", lookupd.tcp_port)
    second = start_nsqd(tmp_path, "n2", lookupd.tcp_port)
    trio.run(wait_identified, lookupd, first, second)
    trio.run(publish, first.tcp_port, "found", [b"from-1-%d" % i for i in range(50)])
    trio.run(publish, second.tcp_port, "found", [b"from-2-%d" % i for i in range(50)])
    wait_until(lambda: producer_ports(httpx.get(f"http://127.0.0.1:{lookupd.http_port}/lookup",
                                                params={"topic": "found"}).json()) == {first.tcp_port, second.tcp_port},
               what="both nsqd registered the topic")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    io_loop = tornado.ioloop.IOLoop.current()
    received = set()

    def handler(message):
        received.add(message.body)
        if len(received) == 100:
            io_loop.stop()
        return True

    reader = nsq.Reader(topic="found", channel="ch", lookupd_http_addresses=[f"http://127.0.0.1:{lookupd.http_port}"],
                        message_handler=handler, max_in_flight=20, lookupd_poll_interval=1)
    io_loop.call_later(15, io_loop.stop)
    io_loop.start()
    reader.close()
    io_loop.close(all_fds=True)
    asyncio.set_event_loop(None)
    assert received == {b"from-%d-%d" % (n, i) for n in (1, 2) for i in range(50)}


async def test_lookupd_killed_and_restarted_under_load(tmp_path):
    """nsqlookupd dies (SIGKILL) while two nsqd take messages and a consumer found them through
    it: the consumer keeps consuming from the nsqd it knows, and once nsqlookupd is back on
    its address both nsqd have registered everything again. Nothing acknowledged is lost."""
    tcp_port, http_port = free_port(), free_port()
    ports = (f"--tcp-address=127.0.0.1:{tcp_port}", f"--http-address=127.0.0.1:{http_port}")
    lookupd = LookupdProcess(*ports)
    nsqds = [start_nsqd(tmp_path, name, tcp_port) for name in ("n1", "n2")]
    await wait_identified(lookupd, *nsqds)
    acknowledged: set[bytes] = set()
    received: set[bytes] = set()

    async def publish_steadily(port: int, prefix: bytes) -> None:
        client = await RawClient.connect(port)
        for batch in itertools.count():
            bodies = [b"%s-%d-%d" % (prefix, batch, n) for n in range(10)]
            await client.send(mpub("load", bodies))
            assert await client.read_response() == b"OK"
            acknowledged.update(bodies)
            await trio.sleep(0.01)  # deliberate: a steady publisher, not a flood

    async def handler(message) -> None:
        received.add(message.body)

    async def everything_registered() -> bool:
        answer = await lookup(http_port, "load")
        other = await lookup(http_port, "side")
        return (answer is not None and producer_ports(answer) == {nsqd.tcp_port for nsqd in nsqds}
                and answer["channels"] == ["c"] and producer_ports(other) == {nsqds[1].tcp_port})

    try:
        await publish(nsqds[1].tcp_port, "side", [b"a topic of n2 only"])
        async with trio.open_nursery() as nursery:
            for nsqd, prefix in zip(nsqds, (b"n1", b"n2")):
                nursery.start_soon(publish_steadily, nsqd.tcp_port, prefix)
            async with Consumer("load", "c", handler, lookupd_http_addresses=[f"127.0.0.1:{http_port}"],
                                max_in_flight=100, lookupd_poll_interval=0.5) as consumer:
                async def consuming_from_both() -> bool:
                    return len(consumer.connections) == 2 and {body[:2] for body in received} == {b"n1", b"n2"}

                async def all_consumed() -> bool:
                    return acknowledged <= received

                await wait_for(consuming_from_both, 10, "consumer on both nsqd")
                await wait_for(everything_registered, 5, "registrations before the kill")

                assert lookupd.stop(signal.SIGKILL) == -signal.SIGKILL
                at_kill = set(received)
                await trio.sleep(1.0)  # deliberate: the consumer polls the dead lookupd (every 0.5 s) meanwhile

                async def consumed_meanwhile() -> bool:
                    meanwhile = received - at_kill
                    return {body[:2] for body in meanwhile} == {b"n1", b"n2"} and len(meanwhile) > 200

                await wait_for(consumed_meanwhile, 10, "messages from both nsqd while nsqlookupd is dead")
                assert len(consumer.connections) == 2

                lookupd = LookupdProcess(*ports)
                await wait_for(everything_registered, 6, "every registration back after the restart")
                nursery.cancel_scope.cancel()
                await wait_for(all_consumed, 5, "every acknowledged message consumed")
                assert len(consumer.connections) == 2
    finally:
        lookupd.stop()
