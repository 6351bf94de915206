"""nsqclient.Consumer against a real nsqd, under asyncio and trio: FIN, REQ and backoff,
max_attempts and the give-up hook, TOUCH, heartbeats, concurrent handlers, graceful close and
its timeout."""

import anyio
import pytest

from nsqclient import Consumer, Message, Producer, ProtocolError

from .client_helpers import backend, channel_stats, nsqd, run, unique, wait_for  # noqa: F401 (fixtures)


async def publish(nsqd, topic: str, bodies: list[bytes]) -> None:
    async with Producer(nsqd.tcp_address) as producer:
        await producer.multi_publish(topic, bodies)


def test_every_message_is_handled_once_and_finished(backend, nsqd):
    topic = unique()
    bodies = [b"message %d" % n for n in range(2000)]
    handled = []

    async def body():
        await publish(nsqd, topic, bodies)

        async def handler(message: Message) -> None:
            handled.append(message)

        async with Consumer(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address],
                            max_in_flight=200) as consumer:
            await wait_for(lambda: consumer.stats.messages_finished == len(bodies))
            return consumer.stats

    stats = run(backend, body)
    assert sorted(m.body for m in handled) == sorted(bodies)
    assert all(m.attempts == 1 and len(m.id) == 16 and m.nsqd_address == nsqd.tcp_address for m in handled)
    assert handled[0].timestamp > 1_600_000_000 * 10**9
    assert stats.messages_received == stats.messages_finished == len(bodies) and stats.messages_requeued == 0
    channel = channel_stats(nsqd, topic, "ch")
    assert (channel["depth"], channel["in_flight_count"], channel["requeue_count"]) == (0, 0, 0)


def test_a_failing_handler_requeues_and_the_consumer_backs_off_then_resumes(backend, nsqd):
    topic = unique()
    seen = []

    async def body():
        await publish(nsqd, topic, [b"fail once"] + [b"ok %d" % n for n in range(4)])

        async def handler(message: Message) -> None:
            seen.append((message.body, message.attempts, consumer.in_backoff, consumer.total_rdy))
            if message.body == b"fail once" and message.attempts == 1:
                raise RuntimeError("not this time")

        # the retry is due 0.3 s later, after the 0.2 s backoff (0.1 s x 2^1)
        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=10,
                            backoff_multiplier=0.1, default_requeue_delay=0.3)
        async with consumer:
            await wait_for(lambda: consumer.stats.messages_finished == 5)
            await wait_for(lambda: not consumer.in_backoff and consumer.total_rdy == 10)
            return consumer.stats

    stats = run(backend, body)
    assert stats.messages_requeued == 1
    retried = [entry for entry in seen if entry[:2] == (b"fail once", 2)]
    # the retry came through the one RDY that backoff lets in, while still in backoff
    assert retried == [(b"fail once", 2, True, 1)]
    assert channel_stats(nsqd, topic, "ch")["requeue_count"] == 1


def test_requeue_without_backoff_and_an_explicit_delay(backend, nsqd):
    topic = unique()
    seen = []

    async def body():
        await publish(nsqd, topic, [b"again"])

        async def handler(message: Message) -> None:
            seen.append((message.attempts, consumer.in_backoff))
            if message.attempts == 1:
                message.requeue(0.2, backoff=False)

        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address])
        async with consumer:
            started = anyio.current_time()
            await wait_for(lambda: consumer.stats.messages_finished == 1)
            return anyio.current_time() - started

    waited = run(backend, body)
    assert seen == [(1, False), (2, False)]
    assert waited >= 0.2


def test_a_message_past_max_attempts_goes_to_the_give_up_hook_and_is_finished(backend, nsqd):
    topic = unique()
    attempts, given_up = [], []

    async def body():
        await publish(nsqd, topic, [b"poison"])

        async def handler(message: Message) -> None:
            attempts.append(message.attempts)
            raise ValueError("cannot handle this")

        async def give_up(message: Message) -> None:
            given_up.append((message.body, message.attempts))

        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], max_attempts=3,
                            default_requeue_delay=0, backoff_multiplier=0.01, on_give_up=give_up)
        async with consumer:
            await wait_for(lambda: given_up)
            await wait_for(lambda: consumer.stats.messages_finished == 1)

    run(backend, body)
    assert attempts == [1, 2, 3] and given_up == [(b"poison", 4)]
    channel = channel_stats(nsqd, topic, "ch")
    assert (channel["depth"], channel["in_flight_count"]) == (0, 0)


def test_touch_keeps_a_long_job_from_timing_out(nsqd):
    topic = unique()
    attempts = []

    async def body():
        await publish(nsqd, topic, [b"long job"])

        async def handler(message: Message) -> None:
            attempts.append(message.attempts)
            for _ in range(6):  # 1.5 s of work, with a 1 s msg_timeout
                await anyio.sleep(0.25)  # deliberate: the handler's work
                message.touch()

        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], msg_timeout=1)
        async with consumer:
            await wait_for(lambda: consumer.stats.messages_finished == 1)

    run("asyncio", body)  # the slow tests take one backend each (heartbeats: trio)
    assert attempts == [1]
    assert channel_stats(nsqd, topic, "ch")["timeout_count"] == 0


def test_heartbeats_are_answered_so_an_idle_consumer_stays_connected(nsqd):
    topic = unique()
    got = []

    async def body():
        async def handler(message: Message) -> None:
            got.append(message.body)

        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], heartbeat_interval=1)
        async with consumer:
            [first] = consumer.connections.values()
            await anyio.sleep(2.5)  # deliberate: long enough that nsqd would drop a client silent for 2 heartbeats
            await publish(nsqd, topic, [b"still here"])
            await wait_for(lambda: got)
            assert consumer.connections == {nsqd.tcp_address: first}

    run("trio", body)
    assert got == [b"still here"]


def test_handlers_can_run_concurrently(backend, nsqd):
    topic = unique()
    running, most = [0], [0]

    async def body():
        await publish(nsqd, topic, [b"%d" % n for n in range(20)])

        async def handler(message: Message) -> None:
            running[0] += 1
            most[0] = max(most[0], running[0])
            await anyio.sleep(0.05)  # deliberate: work that overlaps another handler's
            running[0] -= 1

        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=20,
                            concurrency=5)
        async with consumer:
            await wait_for(lambda: consumer.stats.messages_finished == 20)

    run(backend, body)
    assert most[0] == 5


def test_graceful_close_finishes_what_was_received_and_takes_no_more(backend, nsqd):
    topic = unique()
    handled = []

    async def body():
        await publish(nsqd, topic, [b"%d" % n for n in range(10)])

        async def handler(message: Message) -> None:
            if not handled:
                consumer.stop()
            handled.append(message.body)
            await anyio.sleep(0.02)  # deliberate: work the stop must wait for

        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=4)
        async with consumer:
            await consumer.wait_stopped()
            return consumer.stats

    stats = run(backend, body)
    channel = channel_stats(nsqd, topic, "ch")
    assert 1 <= len(handled) <= 4 and stats.messages_finished == len(handled) and stats.connections == 0
    assert (channel["depth"], channel["in_flight_count"], channel["requeue_count"]) == (10 - len(handled), 0, 0)


def test_close_after_the_stop_timeout_requeues_what_is_still_in_flight(backend, nsqd):
    topic = unique()

    async def body():
        await publish(nsqd, topic, [b"stuck", b"waiting"])

        async def handler(message: Message) -> None:
            consumer.stop()
            await anyio.sleep_forever()

        consumer = Consumer(topic, "ch", handler, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=2,
                            stop_timeout=0.3)
        async with consumer:
            await consumer.wait_stopped()

    run(backend, body)
    channel = channel_stats(nsqd, topic, "ch")
    assert (channel["depth"], channel["in_flight_count"], channel["requeue_count"]) == (2, 0, 2)


def test_a_handler_must_be_async():
    def handler(message):
        pass

    with pytest.raises(TypeError):
        Consumer("t", "ch", handler, nsqd_tcp_addresses=["127.0.0.1:1"])


def test_invalid_names_are_refused_with_nsqs_codes():
    with pytest.raises(ProtocolError) as raised:
        Consumer("bad topic", "ch", None, nsqd_tcp_addresses=["127.0.0.1:1"])
    assert raised.value.code == "E_BAD_TOPIC"
    with pytest.raises(ProtocolError) as raised:
        Consumer("t", "c h", None, nsqd_tcp_addresses=["127.0.0.1:1"])
    assert raised.value.code == "E_BAD_CHANNEL"
