"""Running a utility's consumers until SIGINT/SIGTERM (or until the utility stops them), then
stopping them gracefully: no more messages are taken, those received are handled and
answered, every connection closes (go-nsq's Consumer.Stop and StopChan)."""

from typing import Callable

import anyio

from common.names import is_valid_name
from nsqclient import Consumer, NSQError

from .golog import Fatal
from .running import watch_signals


def make_consumer(topic: str, channel: str, handler, nsqd_addresses: list[str], lookupd_addresses: list[str],
                  **options) -> Consumer:
    """A Consumer, or Fatal with the reason it cannot be made (NewConsumer / ConnectTo* errors)."""
    for name, kind in ((topic, "topic"), (channel, "channel")):
        if not is_valid_name(name):
            raise Fatal(f"invalid {kind} name")  # go-nsq's NewConsumer, before any connection
    try:
        return Consumer(topic, channel, handler, nsqd_tcp_addresses=nsqd_addresses,
                        lookupd_http_addresses=lookupd_addresses, **options)
    except (NSQError, ValueError) as exc:
        raise Fatal(str(exc)) from None


async def _start(task_group, consumer: Consumer, nsqd_addresses: list[str]) -> None:
    """Start consuming; an nsqd given on the command line that cannot be reached is fatal, as
    go-nsq's ConnectToNSQDs error is for the Go utilities."""
    await task_group.start(consumer.run)
    for address in nsqd_addresses:
        if address not in consumer.connections:
            raise Fatal(f"failed to connect to nsqd at {address}")


async def consume(consumers: list[Consumer], nsqd_addresses: list[str],
                  on_stop: Callable[[], None] = lambda: None) -> None:
    """Consume until a stop signal, then stop every consumer and wait for them (``on_stop`` first)."""
    def stop(_signum: int | None = None) -> None:
        on_stop()
        for consumer in consumers:
            consumer.stop()

    async with anyio.create_task_group() as task_group:
        await task_group.start(watch_signals, stop)
        for consumer in consumers:
            await _start(task_group, consumer, nsqd_addresses)
        for consumer in consumers:
            await consumer.wait_stopped()
        task_group.cancel_scope.cancel()
