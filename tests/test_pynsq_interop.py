"""pynsq (NSQ's official Python client, from PyPI) against a real nsqd process."""

import asyncio
import collections
import time

import nsq
import pytest
import tornado.ioloop


class TornadoLoop:
    """A fresh tornado IOLoop per test, run until a condition holds or a timeout passes."""

    def __init__(self):
        self.asyncio_loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.asyncio_loop)
        self.io_loop = tornado.ioloop.IOLoop.current()
        self.clients = []

    def keep(self, client):
        self.clients.append(client)
        return client

    def run_until(self, condition, timeout: float) -> None:
        deadline = time.monotonic() + timeout

        def check():
            if condition() or time.monotonic() > deadline:
                self.io_loop.stop()

        poller = tornado.ioloop.PeriodicCallback(check, 10)
        poller.start()
        self.io_loop.start()
        poller.stop()
        if not condition():
            raise AssertionError(f"condition not met within {timeout}s")

    def run_for(self, seconds: float) -> None:
        self.io_loop.call_later(seconds, self.io_loop.stop)
        self.io_loop.start()

    def close(self) -> None:
        for client in self.clients:
            if isinstance(client, nsq.Reader):
                client.close()
            else:
                for conn in list(client.conns.values()):
                    conn.close()
        self.run_for(0.05)
        self.io_loop.close(all_fds=True)
        asyncio.set_event_loop(None)


@pytest.fixture
def tornado_loop():
    loop = TornadoLoop()
    yield loop
    loop.close()


def writer(loop: TornadoLoop, nsqd_process) -> nsq.Writer:
    w = loop.keep(nsq.Writer([nsqd_process.tcp_address]))
    loop.run_until(lambda: bool(w.conns), timeout=5)
    return w


def publish(loop: TornadoLoop, call, *args) -> None:
    """Run one Writer call and wait for nsqd's answer, which must be OK."""
    results = []
    call(*args, callback=lambda conn, data: results.append(data))
    loop.run_until(lambda: results, timeout=5)
    assert results == [b"OK"], results


def reader(loop: TornadoLoop, nsqd_process, topic: str, channel: str, handler, **kwargs) -> nsq.Reader:
    return loop.keep(nsq.Reader(topic=topic, channel=channel, nsqd_tcp_addresses=[nsqd_process.tcp_address],
                                message_handler=handler, **kwargs))


def test_pub_mpub_dpub_are_acknowledged_and_delivered(tornado_loop, nsqd_process):
    w = writer(tornado_loop, nsqd_process)
    publish(tornado_loop, w.pub, "interop", b"one")
    publish(tornado_loop, w.mpub, "interop", [b"two", b"three"])
    published_at = time.monotonic()
    publish(tornado_loop, w.dpub, "interop", 700, b"four")
    arrivals = {}

    def handler(message):
        arrivals[message.body] = time.monotonic()
        return True

    reader(tornado_loop, nsqd_process, "interop", "ch", handler, max_in_flight=10)
    tornado_loop.run_until(lambda: len(arrivals) == 4, timeout=10)
    assert set(arrivals) == {b"one", b"two", b"three", b"four"}
    assert arrivals[b"four"] - published_at >= 0.7


def test_reader_consumes_ten_thousand_messages_without_loss(tornado_loop, nsqd_process):
    w = writer(tornado_loop, nsqd_process)
    bodies = [b"msg-%05d" % i for i in range(10_000)]
    for start in range(0, len(bodies), 1000):
        publish(tornado_loop, w.mpub, "bulk", bodies[start:start + 1000])
    received = collections.Counter()

    def handler(message):
        received[message.body] += 1
        return True

    reader(tornado_loop, nsqd_process, "bulk", "ch", handler, max_in_flight=100)
    tornado_loop.run_until(lambda: len(received) == len(bodies), timeout=60)
    tornado_loop.run_for(0.3)
    assert set(received) == set(bodies)
    assert max(received.values()) == 1


def test_requeue_with_delay_redelivers_with_attempts_incremented(tornado_loop, nsqd_process):
    w = writer(tornado_loop, nsqd_process)
    publish(tornado_loop, w.pub, "requeue", b"retry-me")
    deliveries = []

    def handler(message):
        deliveries.append((message.attempts, time.monotonic(), message.id))
        if len(deliveries) == 1:
            message.requeue(delay=1, backoff=False)
            return None
        return True

    reader(tornado_loop, nsqd_process, "requeue", "ch", handler, max_in_flight=1)
    tornado_loop.run_until(lambda: len(deliveries) == 2, timeout=10)
    (first_attempts, first_at, first_id), (second_attempts, second_at, second_id) = deliveries
    assert (first_attempts, second_attempts) == (1, 2)
    assert first_id == second_id
    assert 1.0 <= second_at - first_at < 1.5


def test_timeout_redelivers_and_touch_keeps_a_message(tornado_loop, nsqd_process):
    w = writer(tornado_loop, nsqd_process)
    publish(tornado_loop, w.pub, "timeouts", b"forgotten")
    publish(tornado_loop, w.pub, "timeouts", b"touched")
    seen = []

    def handler(message):
        seen.append((message.body, message.attempts, time.monotonic()))
        message.enable_async()
        if message.body == b"touched":
            for delay in (0.6, 1.2, 1.8):
                tornado_loop.io_loop.call_later(delay, message.touch)
            tornado_loop.io_loop.call_later(2.2, message.finish)
        elif message.attempts == 2:
            message.finish()

    reader(tornado_loop, nsqd_process, "timeouts", "ch", handler, max_in_flight=5, msg_timeout=1)
    tornado_loop.run_until(lambda: len(seen) == 3, timeout=10)
    tornado_loop.run_for(1.5)
    bodies = [(body, attempts) for body, attempts, _ in seen]
    assert sorted(bodies) == [(b"forgotten", 1), (b"forgotten", 2), (b"touched", 1)]
    forgotten = [at for body, _, at in seen if body == b"forgotten"]
    assert 1.0 <= forgotten[1] - forgotten[0] < 1.5


def test_two_channels_each_receive_every_message(tornado_loop, nsqd_process):
    w = writer(tornado_loop, nsqd_process)
    got = {"a": collections.Counter(), "b": collections.Counter()}
    for name in got:
        reader(tornado_loop, nsqd_process, "fanout", name,
               lambda message, name=name: got[name].update([message.body]) or True, max_in_flight=50)
    tornado_loop.run_for(0.5)
    bodies = [b"f-%04d" % i for i in range(500)]
    publish(tornado_loop, w.mpub, "fanout", bodies)
    tornado_loop.run_until(lambda: all(len(counter) == 500 for counter in got.values()), timeout=20)
    tornado_loop.run_for(0.3)
    for counter in got.values():
        assert set(counter) == set(bodies)
        assert max(counter.values()) == 1


def test_two_consumers_on_one_channel_split_the_messages(tornado_loop, nsqd_process):
    w = writer(tornado_loop, nsqd_process)
    per_reader = [collections.Counter(), collections.Counter()]
    for counter in per_reader:
        reader(tornado_loop, nsqd_process, "split", "shared",
               lambda message, counter=counter: counter.update([message.body]) or True, max_in_flight=20)
    tornado_loop.run_for(0.5)
    bodies = [b"s-%04d" % i for i in range(2000)]
    for start in range(0, len(bodies), 200):
        publish(tornado_loop, w.mpub, "split", bodies[start:start + 200])
    tornado_loop.run_until(lambda: sum(len(c) for c in per_reader) == len(bodies), timeout=20)
    tornado_loop.run_for(0.3)
    first, second = per_reader
    assert first and second, "both consumers get a share"
    assert not set(first) & set(second)
    assert set(first) | set(second) == set(bodies)
    assert max(first.values()) == max(second.values()) == 1
