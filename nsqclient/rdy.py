"""How a Consumer spreads ``max_in_flight`` over its nsqd connections (go-nsq consumer.go):
pure functions over numbers, so the rules can be tested on their own.

Theory of operation:

* RDY n on a connection lets nsqd keep up to n messages in flight on it. Each connection
  gets ``max_in_flight / connections`` (at least 1, at most ``max_in_flight``), sent when a
  connection comes or goes and when backoff ends.
* The sum of every connection's RDY never passes ``max_in_flight``: a new RDY is cut down to
  what is left; a connection at RDY 0 that can get nothing retries 5 s later.
* With more connections than ``max_in_flight`` (or in backoff with more than one), not every
  connection can have RDY 1 at once. Every ``rdy_redistribute_interval`` the Consumer takes
  RDY back from connections idle for ``low_rdy_idle_timeout`` or holding it for
  ``low_rdy_timeout``, then hands RDY 1 to connections picked at random while any of
  ``max_in_flight`` (1 in backoff) is left, so every nsqd is drained in turn.
"""

import random
from typing import NamedTuple

RDY_RETRY_DELAY = 5.0  # go-nsq's fixed delay before retrying a RDY that did not fit
STARVED_RATIO = 0.85


class RdyView(NamedTuple):
    """What the rules need to know about one connection."""

    key: object
    rdy: int
    last_message_time: float
    last_rdy_time: float


def per_connection(max_in_flight: int, connections: int) -> int:
    """Each connection's share of max_in_flight: at least 1, at most max_in_flight."""
    if connections <= 0:
        return max_in_flight
    return int(min(max(1.0, max_in_flight / connections), max_in_flight))


def within_max_in_flight(count: int, conn_rdy: int, max_in_flight: int, total_rdy: int) -> int | None:
    """``count`` cut down so the total stays within max_in_flight; None if nothing fits."""
    max_possible = max_in_flight - total_rdy + conn_rdy
    if 0 < max_possible < count:
        return max_possible
    if max_possible <= 0 and count > 0:
        return None
    return count


def needs_redistribution(connections: int, max_in_flight: int, in_backoff: bool) -> bool:
    """The two cases where not every connection can hold RDY at once."""
    return connections > max_in_flight or (in_backoff and connections > 1)


def idle_connections(conns: list[RdyView], now: float, low_rdy_idle_timeout: float,
                     low_rdy_timeout: float) -> list[object]:
    """Connections that must give their RDY back: no message for a while, or RDY held too long."""
    return [conn.key for conn in conns if conn.rdy > 0 and (
        now - conn.last_message_time > low_rdy_idle_timeout or now - conn.last_rdy_time > low_rdy_timeout)]


def available_max_in_flight(max_in_flight: int, total_rdy: int, in_backoff: bool) -> int:
    return (1 if in_backoff else max_in_flight) - total_rdy


def pick_connections(keys: list[object], available: int, rng: random.Random) -> list[object]:
    """Up to ``available`` connections, at random, each to get RDY 1."""
    if available <= 0:
        return []
    return rng.sample(keys, min(available, len(keys)))


def is_starved(conns: list[tuple[int, int, bool]]) -> bool:
    """Whether some connection (in_flight, rdy, closing) has nearly all its RDY in flight."""
    return any(in_flight > 0 and in_flight >= int(rdy * STARVED_RATIO) and not closing
               for in_flight, rdy, closing in conns)
