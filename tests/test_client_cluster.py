"""nsqclient.Consumer over several real nsqd and a real nsqlookupd: max_in_flight spread over
the connections and redistributed as nsqd come and go, max_in_flight below the number of nsqd,
reconnect after an nsqd restart, discovery through an nsqlookupd that goes away and comes back."""

import anyio
import pytest

from nsqclient import Consumer, Message, NSQError, Producer

from .client_helpers import backend, run, start_nsqd, unique, wait_for  # noqa: F401 (fixtures)
from .lookupd_helpers import LookupdProcess


@pytest.fixture(scope="module")
def three_nsqd(tmp_path_factory):
    nodes = [start_nsqd(tmp_path_factory) for _ in range(3)]
    yield nodes
    for node in nodes:
        node.stop()


async def publish(address: str, topic: str, bodies: list[bytes]) -> None:
    async with Producer(address) as producer:
        await producer.multi_publish(topic, bodies)


def rdy_by_address(consumer: Consumer) -> dict[str, int]:
    return {address: conn.rdy for address, conn in consumer.connections.items()}


def test_max_in_flight_is_spread_over_every_nsqd_and_again_when_one_goes(backend, three_nsqd):
    """(A real nsqd going away is in the restart test below; here the consumer drops one.)"""
    topic = unique()
    addresses = [node.tcp_address for node in three_nsqd]

    async def body():
        async def handler(message: Message) -> None:
            pass

        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=addresses, max_in_flight=9)
        async with consumer:
            await wait_for(lambda: len(consumer.connections) == 3)
            spread = rdy_by_address(consumer)
            consumer.disconnect_from_nsqd(addresses[2])
            await wait_for(lambda: len(consumer.connections) == 2)
            respread = rdy_by_address(consumer)
            return spread, respread, consumer.total_rdy

    spread, respread, total = run(backend, body)
    assert spread == dict.fromkeys(addresses, 3)
    assert respread == dict.fromkeys(addresses[:2], 4) and total == 8


def test_max_in_flight_below_the_number_of_nsqd_rotates_rdy_over_them(backend, three_nsqd):
    topic = unique()
    totals = []

    async def body():
        for n, node in enumerate(three_nsqd):
            await publish(node.tcp_address, topic, [b"%d-%d" % (n, i) for i in range(3)])
        handled = []

        async def handler(message: Message) -> None:
            handled.append(message.body)
            totals.append(sum(conn.rdy for conn in consumer.connections.values()))

        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[node.tcp_address for node in three_nsqd],
                            max_in_flight=2, rdy_redistribute_interval=0.05, low_rdy_idle_timeout=1,
                            low_rdy_timeout=1)
        async with consumer:
            while len(handled) < 9:
                totals.append(consumer.total_rdy)
                await anyio.sleep(0.01)  # deliberate: a sampler of the RDY total
        return handled

    handled = run(backend, body, timeout=30)
    assert sorted(handled) == sorted(b"%d-%d" % (n, i) for n in range(3) for i in range(3))
    assert max(totals) <= 2


def test_the_consumer_reconnects_to_an_nsqd_that_restarts(tmp_path_factory):
    node = start_nsqd(tmp_path_factory)
    address = node.tcp_address
    topic = unique()
    got = []

    async def body():
        nonlocal node
        await publish(address, topic, [b"before"])

        async def handler(message: Message) -> None:
            got.append(message.body)

        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[address], lookupd_poll_interval=0.2)
        async with consumer:
            await wait_for(lambda: got == [b"before"])
            node.stop()
            await wait_for(lambda: not consumer.connections)
            node = start_nsqd(tmp_path_factory, f"--tcp-address={address}")
            await publish(address, topic, [b"after"])
            await wait_for(lambda: got == [b"before", b"after"])

    try:
        run("trio", body)  # the slow tests take one backend each (lookupd: asyncio)
    finally:
        node.stop()


def test_discovery_through_a_lookupd_that_goes_away_and_comes_back(tmp_path_factory):
    lookupd = LookupdProcess()
    lookupd_flags = (f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", "--broadcast-address=127.0.0.1")
    first = start_nsqd(tmp_path_factory, *lookupd_flags)
    nodes = [first]
    topic = unique()
    got = []

    async def body():
        nonlocal lookupd
        await publish(first.tcp_address, topic, [b"first"])

        async def handler(message: Message) -> None:
            got.append(message.body)

        consumer = Consumer(topic, "ch", handler, lookupd_http_addresses=[f"127.0.0.1:{lookupd.http_port}"],
                            lookupd_poll_interval=0.2, max_in_flight=10)
        async with consumer:
            await wait_for(lambda: got == [b"first"])
            lookupd.stop()
            await publish(first.tcp_address, topic, [b"while lookupd is away"])
            await wait_for(lambda: len(got) == 2)
            second = start_nsqd(tmp_path_factory, *lookupd_flags)
            nodes.append(second)
            await publish(second.tcp_address, topic, [b"from the second nsqd"])
            lookupd = LookupdProcess(f"--tcp-address=127.0.0.1:{lookupd.tcp_port}",
                                     f"--http-address=127.0.0.1:{lookupd.http_port}")
            await wait_for(lambda: len(got) == 3, timeout=10)
            with pytest.raises(NSQError):
                consumer.disconnect_from_nsqlookupd(f"127.0.0.1:{lookupd.http_port}")
            return set(consumer.connections)

    try:
        connected = run("asyncio", body, timeout=20)
    finally:
        for node in nodes:
            node.stop()
        lookupd.stop()
    assert got == [b"first", b"while lookupd is away", b"from the second nsqd"]
    assert connected == {node.tcp_address for node in nodes}
