"""Publish to several nsqd, moving away from one that drains (beyond go-nsq; nsqd/drain.py).

::

    async with ProducerPool(["10.0.0.1:4150", "10.0.0.2:4150"]) as pool:
        await pool.publish("events", b"hello")

Theory of operation:

* One :class:`Producer` per address. Each publish goes to the first address not left out, so
  one pool's messages keep their order on one nsqd while nothing changes.
* An nsqd that drains refuses a publish before taking it (``E_PUB_FAILED PUB failed draining``,
  and the same for MPUB and DPUB), so the publish is sent to the next address at once and the
  draining one is left out for ``retry_after`` seconds (a drained nsqd exits; one started
  again at that address is used again after that). An nsqd that cannot be reached
  (:class:`ConnectError`: nothing was sent) is left out the same way.
* Anything else raises as the Producer's would: an error frame about the message, or
  :class:`ConnectionClosedError` when the connection ended with the publish unanswered (nsqd
  may have taken it, and sending it elsewhere could deliver it twice: the caller decides).
* When every address is left out, each is tried again in order; the last refusal raises.
"""

import contextlib
import logging

import anyio

from .config import Config, make_config
from .errors import ConnectError, NSQError, ProtocolError
from .producer import Producer

log = logging.getLogger("nsqclient")

RETRY_AFTER = 30.0  # seconds a draining or unreachable nsqd is left out


def refused_for_drain(error: ProtocolError) -> bool:
    """Whether nsqd refused a publish because it drains (it took nothing)."""
    return error.code.endswith("_FAILED") and error.description.endswith(" failed draining")


class ProducerPool:
    def __init__(self, addresses: list[str], config: Config | None = None, retry_after: float = RETRY_AFTER,
                 **options):
        if not addresses:
            raise ValueError("ProducerPool needs at least one nsqd address")
        self.config = make_config(config, options)
        self.producers = {address: Producer(address, self.config) for address in addresses}
        self.retry_after = retry_after
        self._left_out: dict[str, float] = {}  # address -> when it may be used again
        self._stack: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> "ProducerPool":
        stack = contextlib.AsyncExitStack()
        for producer in self.producers.values():
            await stack.enter_async_context(producer)
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self._stack.aclose()

    @property
    def usable(self) -> list[str]:
        """The addresses publishes go to now, first one first."""
        now = anyio.current_time()
        return [address for address in self.producers if self._left_out.get(address, 0) <= now]

    async def publish(self, topic: str, body: bytes) -> str:
        """PUB one message; the address of the nsqd that took it."""
        return await self._send(lambda producer: producer.publish(topic, body))

    async def multi_publish(self, topic: str, bodies) -> str:
        bodies = list(bodies)
        return await self._send(lambda producer: producer.multi_publish(topic, bodies))

    async def deferred_publish(self, topic: str, delay: float, body: bytes) -> str:
        return await self._send(lambda producer: producer.deferred_publish(topic, delay, body))

    async def _send(self, command) -> str:
        last: NSQError | None = None
        for address in self.usable or list(self.producers):
            try:
                await command(self.producers[address])
                return address
            except ProtocolError as error:
                if not refused_for_drain(error):
                    raise
                log.warning("(%s) nsqd is draining: publishing to the others for %gs", address, self.retry_after)
                last = error
            except ConnectError as error:
                log.warning("(%s) nsqd unreachable: publishing to the others for %gs - %s",
                            address, self.retry_after, error)
                last = error
            self._left_out[address] = anyio.current_time() + self.retry_after
        raise last
