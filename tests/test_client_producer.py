"""nsqclient.Producer against a real nsqd, under asyncio and trio: PUB/MPUB/DPUB, pipelining
with answers matched in order, NSQ's error codes as exceptions, reconnect after nsqd restarts,
and the blocking helpers."""

import anyio
import pytest

from nsqclient import (BlockingProducer, ConnectError, ConnectionClosedError, Producer, ProtocolError, StoppedError,
                       publish)

from .client_helpers import backend, nsqd, run, start_nsqd, topic_stats, unique  # noqa: F401 (fixtures)


def test_pub_mpub_dpub_are_acknowledged_and_reach_the_topic(backend, nsqd):
    topic = unique()

    async def body():
        async with Producer(nsqd.tcp_address) as producer:
            await producer.publish(topic, b"one")
            await producer.multi_publish(topic, [b"two", b"three", b"four"])
            await producer.deferred_publish(topic, 0.5, b"five")

    run(backend, body)
    assert topic_stats(nsqd, topic)["message_count"] == 5


def test_many_publishes_in_flight_at_once_are_each_answered(backend, nsqd):
    topic = unique()
    sent = 500
    most_waiting = 0

    async def body():
        nonlocal most_waiting
        async with Producer(nsqd.tcp_address) as producer:
            await producer.connect()
            async with anyio.create_task_group() as task_group:
                for n in range(sent):
                    task_group.start_soon(producer.publish, topic, b"message %d" % n)
                while producer.pending or not most_waiting:
                    most_waiting = max(most_waiting, producer.pending)
                    await anyio.sleep(0)  # a checkpoint: the publishers run between samples

    run(backend, body)
    assert topic_stats(nsqd, topic)["message_count"] == sent
    assert most_waiting > 1, "the publishes were never pipelined"


def test_an_error_answer_goes_to_the_publish_that_caused_it(backend, nsqd):
    topic = unique()
    outcomes = {}

    async def publish_one(producer, n):
        try:
            await producer.publish(topic, b"" if n == 25 else b"message %d" % n)
            outcomes[n] = "OK"
        except ProtocolError as exc:
            outcomes[n] = exc.code
        except ConnectionClosedError:
            outcomes[n] = "closed"

    async def body():
        async with Producer(nsqd.tcp_address) as producer:
            await producer.connect()
            async with anyio.create_task_group() as task_group:
                for n in range(50):
                    task_group.start_soon(publish_one, producer, n)

    run(backend, body)
    assert outcomes.pop(25) == "E_BAD_MESSAGE"
    assert set(outcomes.values()) <= {"OK", "closed"}
    assert topic_stats(nsqd, topic).get("message_count", 0) == list(outcomes.values()).count("OK")


@pytest.mark.parametrize("call, code, text", [
    (lambda p, t: p.publish(t, b""), "E_BAD_MESSAGE", "PUB invalid message body size 0"),
    (lambda p, t: p.multi_publish(t, [b"x" * (1024 * 1024 + 1)]), "E_BAD_MESSAGE", "MPUB message too big"),
    (lambda p, t: p.deferred_publish(t, 3600.001, b"x"), "E_INVALID", "DPUB timeout 3600001 out of range 0-3600000"),
    (lambda p, t: p.publish("bad topic", b"x"), "E_BAD_TOPIC", 'PUB topic name "bad topic" is not valid'),
    (lambda p, t: p.multi_publish("x\nFIN", [b"x"]), "E_BAD_TOPIC", 'E_BAD_TOPIC MPUB topic name "x\\nFIN" is not'),
])
def test_nsqd_errors_raise_protocol_errors_with_nsqs_code_and_the_producer_goes_on(backend, nsqd, call, code, text):
    topic = unique()

    async def body():
        async with Producer(nsqd.tcp_address) as producer:
            with pytest.raises(ProtocolError) as raised:
                await call(producer, topic)
            await producer.publish(topic, b"after the error")
            return raised.value

    error = run(backend, body)
    assert error.code == code and error.description.startswith(text) and error.fatal
    assert topic_stats(nsqd, topic)["message_count"] == 1


def test_the_producer_reconnects_after_nsqd_restarts(backend, tmp_path_factory):
    first = start_nsqd(tmp_path_factory)
    address = first.tcp_address
    topic = unique()

    async def body():
        nonlocal first
        async with Producer(address, dial_timeout=2) as producer:
            await producer.publish(topic, b"before")
            first.stop()
            with pytest.raises((ConnectionClosedError, ConnectError)):
                for _ in range(100):  # until the loss is seen
                    await producer.publish(topic, b"lost")
                    await anyio.sleep(0.02)  # deliberate: a publisher's pace, not a flood
            with pytest.raises(ConnectError):
                await producer.publish(topic, b"nobody there")
            first = start_nsqd(tmp_path_factory, f"--tcp-address={address}")
            await producer.publish(topic, b"after")

    try:
        run(backend, body)
        assert topic_stats(first, topic)["message_count"] == 1
    finally:
        first.stop()


def test_a_stopped_producer_refuses_to_publish(backend, nsqd):
    async def body():
        async with Producer(nsqd.tcp_address) as producer:
            await producer.publish(unique(), b"x")
            producer.stop()
            with pytest.raises(StoppedError):
                await producer.publish(unique(), b"x")

    run(backend, body)


def test_blocking_publish_and_blocking_producer(nsqd):
    topic = unique()
    publish(nsqd.tcp_address, topic, b"one")
    publish(nsqd.tcp_address, topic, [b"two", b"three"])
    publish(nsqd.tcp_address, topic, b"four", delay=0.1)
    with BlockingProducer(nsqd.tcp_address) as producer:
        producer.publish(topic, b"five")
        producer.multi_publish(topic, [b"six", b"seven"])
        with pytest.raises(ProtocolError) as raised:
            producer.publish(topic, b"")
        assert raised.value.code == "E_BAD_MESSAGE"
        producer.deferred_publish(topic, 0.1, b"eight")
    assert topic_stats(nsqd, topic)["message_count"] == 8
