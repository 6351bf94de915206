"""Publishing from synchronous code (scripts, shells): the async Producer on an event loop
of its own, in a background thread.

::

    from nsqclient import publish, BlockingProducer

    publish("127.0.0.1:4150", "events", b"hello")              # one PUB
    publish("127.0.0.1:4150", "events", [b"a", b"b"])           # one MPUB
    publish("127.0.0.1:4150", "events", b"later", delay=5.0)    # DPUB, delivered in 5 s

    with BlockingProducer("127.0.0.1:4150") as producer:       # one connection, many publishes
        producer.publish("events", b"hello")
        producer.multi_publish("events", [b"a", b"b"])

Errors are the async API's (:class:`ProtocolError` with nsqd's code, ...).
"""

from anyio.from_thread import start_blocking_portal

from .config import Config
from .producer import Producer


def publish(address: str, topic: str, body: bytes | list[bytes], *, delay: float | None = None,
            config: Config | None = None, **options) -> None:
    """Connect, publish (PUB, MPUB for a list, DPUB with ``delay`` seconds), disconnect."""
    with BlockingProducer(address, config, **options) as producer:
        if delay is not None:
            producer.deferred_publish(topic, delay, body)
        elif isinstance(body, (list, tuple)):
            producer.multi_publish(topic, body)
        else:
            producer.publish(topic, body)


class BlockingProducer:
    """A Producer whose methods block until nsqd answers."""

    def __init__(self, address: str, config: Config | None = None, **options):
        self._producer = Producer(address, config, **options)
        self._portal_manager = None
        self._producer_manager = None
        self._portal = None

    def __enter__(self) -> "BlockingProducer":
        self._portal_manager = start_blocking_portal()
        self._portal = self._portal_manager.__enter__()
        try:
            self._producer_manager = self._portal.wrap_async_context_manager(self._producer)
            self._producer_manager.__enter__()
        except BaseException:
            self._portal_manager.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self._producer_manager.__exit__(None, None, None)
        finally:
            self._portal_manager.__exit__(None, None, None)

    def publish(self, topic: str, body: bytes) -> None:
        self._portal.call(self._producer.publish, topic, body)

    def multi_publish(self, topic: str, bodies: list[bytes]) -> None:
        self._portal.call(self._producer.multi_publish, topic, bodies)

    def deferred_publish(self, topic: str, delay: float, body: bytes) -> None:
        self._portal.call(self._producer.deferred_publish, topic, delay, body)
