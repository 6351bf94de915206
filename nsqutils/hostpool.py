"""Choosing the next upstream address (bitly/go-hostpool), for ``--mode hostpool`` and
``--mode epsilon-greedy`` of nsq_to_http and nsq_to_nsq.

* :class:`HostPool` takes the addresses in turn, passing over those marked failed. A failed
  address is tried again after 30 s, then after twice as long each time it fails again (at
  most 900 s); one success makes it live again. When every address is down, all are reset.
* :class:`EpsilonGreedyHostPool` mostly takes the live address with the shortest recent
  response time and, 30 % of the time (go-hostpool's initial epsilon, kept fixed here),
  explores in turn as :class:`HostPool` does.
"""

import random
import time
from collections import deque
from dataclasses import dataclass, field

INITIAL_RETRY_DELAY = 30.0
MAX_RETRY_INTERVAL = 900.0
EPSILON = 0.3
TIMINGS_KEPT = 100


@dataclass
class _Host:
    address: str
    dead: bool = False
    retry_delay: float = 0.0
    next_retry: float = 0.0
    timings: deque = field(default_factory=lambda: deque(maxlen=TIMINGS_KEPT))


class HostPoolResponse:
    """The address chosen; ``mark(error)`` reports how the request went."""

    def __init__(self, pool: "HostPool", host: _Host):
        self.pool = pool
        self.host = host
        self.started = time.monotonic()

    @property
    def address(self) -> str:
        return self.host.address

    def mark(self, error: BaseException | None) -> None:
        if error is None:
            self.pool.mark_success(self.host, time.monotonic() - self.started)
        else:
            self.pool.mark_failed(self.host)


class HostPool:
    def __init__(self, addresses: list[str]):
        self.hosts = [_Host(address) for address in addresses]
        self.next_index = 0

    def get(self) -> HostPoolResponse:
        return HostPoolResponse(self, self._round_robin())

    def _round_robin(self) -> _Host:
        now = time.monotonic()
        for offset in range(len(self.hosts)):
            index = (self.next_index + offset) % len(self.hosts)
            host = self.hosts[index]
            if host.dead and host.next_retry > now:
                continue
            if host.dead:
                host.retry_delay = min(host.retry_delay * 2, MAX_RETRY_INTERVAL)
                host.next_retry = now + host.retry_delay
            self.next_index = index + 1
            return host
        for host in self.hosts:
            host.dead = False
        self.next_index = 0
        return self.hosts[0]

    def mark_success(self, host: _Host, elapsed: float) -> None:
        host.dead = False
        host.timings.append(elapsed)

    def mark_failed(self, host: _Host) -> None:
        if not host.dead:
            host.dead = True
            host.retry_delay = INITIAL_RETRY_DELAY
            host.next_retry = time.monotonic() + host.retry_delay


class EpsilonGreedyHostPool(HostPool):
    def __init__(self, addresses: list[str], rng: random.Random | None = None):
        super().__init__(addresses)
        self.rng = rng or random.Random()

    def get(self) -> HostPoolResponse:
        live = [host for host in self.hosts if not host.dead]
        if not live or self.rng.random() < EPSILON:
            return super().get()
        fastest = min(live, key=lambda host: sum(host.timings) / len(host.timings) if host.timings else 0.0)
        return HostPoolResponse(self, fastest)


def host_pool(mode: str, addresses: list[str]) -> HostPool:
    return EpsilonGreedyHostPool(addresses) if mode == "epsilon-greedy" else HostPool(addresses)
