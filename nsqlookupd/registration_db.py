"""Who produces which topic and channel: nsqlookupd's registration DB (nsqlookupd/registration_db.go).

Theory of operation:

* A :class:`Registration` is ``(category, key, subkey)``: ``("client", "", "")`` for every
  identified peer, ``("topic", topic, "")`` and ``("channel", topic, channel)``. Each maps
  to the producers registered under it, by peer id (the peer's remote ``ip:port``).
* One :class:`PeerInfo` per peer connection, shared by all its :class:`Producer` entries;
  its ``last_update`` (IDENTIFY, then every PING) decides whether the peer is active.
  Each Producer entry has its own tombstone, so a tombstone is per (peer, topic).
* Keys can stay with no producers: a topic created over HTTP, or a peer's
  registrations after it left. Only UNREGISTER of an ``#ephemeral`` name and the HTTP
  delete routes remove keys.
* Queries may use ``*`` as key or subkey. NSQ scans the whole map for those; here two
  indexes (by category, by category+key) keep the common ``/lookup`` and ``/channels``
  queries proportional to their answer. Results come in registration order (Go's map
  order is random).
* Time is injected: ``clock()`` returns Unix nanoseconds (``time.time_ns`` by default),
  the unit NSQ shows in ``/debug``. Timeouts are given in nanoseconds too.
"""

import time
from typing import Callable, Iterable, NamedTuple

from common.names import is_ephemeral

WILDCARD = "*"
# Go's time.Time{}.UnixNano(): what /debug shows as tombstoned_at for a producer never tombstoned.
GO_ZERO_TIME_UNIX_NANO = -6795364578871345152


class Registration(NamedTuple):
    category: str
    key: str
    subkey: str

    def matches(self, category: str, key: str, subkey: str) -> bool:
        return (self.category == category and (key == WILDCARD or self.key == key)
                and (subkey == WILDCARD or self.subkey == subkey))


CLIENT = Registration("client", "", "")


def topic_registration(topic: str) -> Registration:
    return Registration("topic", topic, "")


def channel_registration(topic: str, channel: str) -> Registration:
    return Registration("channel", topic, channel)


class PeerInfo:
    """An identified nsqd, as it described itself in IDENTIFY."""

    __slots__ = ("id", "remote_address", "hostname", "broadcast_address", "tcp_port", "http_port",
                 "version", "last_update", "public")

    def __init__(self, id: str, remote_address: str = "", hostname: str = "", broadcast_address: str = "",
                 tcp_port: int = 0, http_port: int = 0, version: str = "", last_update: int = 0):
        self.id = id
        self.remote_address = remote_address
        self.hostname = hostname
        self.broadcast_address = broadcast_address
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.version = version
        self.last_update = last_update
        # NSQ's PeerInfo JSON, in its field order; fixed once identified.
        self.public = {"remote_address": remote_address, "hostname": hostname,
                       "broadcast_address": broadcast_address, "tcp_port": tcp_port,
                       "http_port": http_port, "version": version}

    def __repr__(self) -> str:
        return f"PeerInfo({self.id!r}, {self.broadcast_address}:{self.tcp_port}/{self.http_port})"


class Producer:
    """One peer's entry under one registration."""

    __slots__ = ("peer_info", "tombstoned", "tombstoned_at")

    def __init__(self, peer_info: PeerInfo):
        self.peer_info = peer_info
        self.tombstoned = False
        self.tombstoned_at = GO_ZERO_TIME_UNIX_NANO

    def tombstone(self, now: int) -> None:
        self.tombstoned = True
        self.tombstoned_at = now

    def is_tombstoned(self, lifetime: int, now: int) -> bool:
        return self.tombstoned and now - self.tombstoned_at < lifetime

    def __repr__(self) -> str:
        peer = self.peer_info
        return f"{peer.broadcast_address} [{peer.tcp_port}, {peer.http_port}]"


class RegistrationDB:
    def __init__(self, clock: Callable[[], int] = time.time_ns):
        self.clock = clock
        self._map: dict[Registration, dict[str, Producer]] = {}
        self._by_category: dict[str, dict[Registration, None]] = {}
        self._by_key: dict[tuple[str, str], dict[Registration, None]] = {}
        self._by_peer: dict[str, dict[Registration, None]] = {}

    def __len__(self) -> int:
        return len(self._map)

    def items(self) -> Iterable[tuple[Registration, dict[str, Producer]]]:
        """Every registration and its producers (by peer id)."""
        return self._map.items()

    # -- changes --------------------------------------------------------------------------

    def _producers(self, k: Registration) -> dict[str, Producer]:
        producers = self._map.get(k)
        if producers is None:
            producers = self._map[k] = {}
            self._by_category.setdefault(k.category, {})[k] = None
            self._by_key.setdefault((k.category, k.key), {})[k] = None
        return producers

    def add_registration(self, k: Registration) -> None:
        """Make sure the key exists (HTTP topic/channel create)."""
        self._producers(k)

    def add_producer(self, k: Registration, producer: Producer) -> bool:
        """Register the producer under ``k``; False (and no change) if its peer already is."""
        producers = self._producers(k)
        peer_id = producer.peer_info.id
        if peer_id in producers:
            return False
        producers[peer_id] = producer
        self._by_peer.setdefault(peer_id, {})[k] = None
        return True

    def remove_producer(self, k: Registration, peer_id: str) -> tuple[bool, int]:
        """(whether the peer was registered under ``k``, producers left). The key stays."""
        producers = self._map.get(k)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        if removed:
            self._forget_peer_registration(peer_id, k)
        return removed, len(producers)

    def remove_registration(self, k: Registration) -> None:
        """Delete the key and every producer under it."""
        producers = self._map.pop(k, None)
        if producers is None:
            return
        for peer_id in producers:
            self._forget_peer_registration(peer_id, k)
        _discard(self._by_category, k.category, k)
        _discard(self._by_key, (k.category, k.key), k)

    def _forget_peer_registration(self, peer_id: str, k: Registration) -> None:
        _discard(self._by_peer, peer_id, k)

    # -- what the V1 commands do (nsqlookupd/lookup_protocol_v1.go) ---------------------------

    def register(self, peer: PeerInfo, topic: str, channel: str = "") -> list[Registration]:
        """REGISTER: the channel (if any), then the topic. Returns the keys newly joined."""
        added = []
        if channel:
            k = channel_registration(topic, channel)
            if self.add_producer(k, Producer(peer)):
                added.append(k)
        k = topic_registration(topic)
        if self.add_producer(k, Producer(peer)):
            added.append(k)
        return added

    def unregister(self, peer_id: str, topic: str, channel: str = "") -> tuple[list[Registration], list[Registration]]:
        """UNREGISTER: (keys left, channel keys left unexpectedly by a topic unregistration).

        An ``#ephemeral`` channel or topic key goes away with its last producer. A topic
        unregistration also leaves the topic's channels (nsqd unregisters those first,
        so NSQ warns when there were any).
        """
        removed, unexpected = [], []
        if channel:
            k = channel_registration(topic, channel)
            was_there, left = self.remove_producer(k, peer_id)
            if was_there:
                removed.append(k)
            if left == 0 and is_ephemeral(channel):
                self.remove_registration(k)
            return removed, unexpected
        for k in self.find_registrations("channel", topic, WILDCARD):
            if self.remove_producer(k, peer_id)[0]:
                unexpected.append(k)
        k = topic_registration(topic)
        was_there, left = self.remove_producer(k, peer_id)
        if was_there:
            removed.append(k)
        if left == 0 and is_ephemeral(topic):
            self.remove_registration(k)
        return removed, unexpected

    def remove_peer(self, peer_id: str) -> list[Registration]:
        """The peer disconnected: leave every key it is registered under (the keys stay)."""
        return [k for k in self.lookup_registrations(peer_id) if self.remove_producer(k, peer_id)[0]]

    # -- queries --------------------------------------------------------------------------

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        if key != WILDCARD and subkey != WILDCARD:
            k = Registration(category, key, subkey)
            return [k] if k in self._map else []
        if key != WILDCARD:
            return list(self._by_key.get((category, key), ()))  # subkey is the wildcard
        candidates = self._by_category.get(category, ())
        if subkey == WILDCARD:
            return list(candidates)
        return [k for k in candidates if k.subkey == subkey]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """The producers under matching keys, one per peer (the first one found)."""
        if key != WILDCARD and subkey != WILDCARD:
            producers = self._map.get(Registration(category, key, subkey))
            return list(producers.values()) if producers else []
        found: dict[str, Producer] = {}
        for k in self.find_registrations(category, key, subkey):
            for peer_id, producer in self._map[k].items():
                found.setdefault(peer_id, producer)
        return list(found.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every key the peer is registered under."""
        return list(self._by_peer.get(peer_id, ()))

    def filter_active(self, producers: list[Producer], inactive_timeout: int,
                      tombstone_lifetime: int) -> list[Producer]:
        """Producers pinged within ``inactive_timeout`` and not tombstoned within
        ``tombstone_lifetime`` (both in ns; a lifetime of 0 ignores tombstones)."""
        now = self.clock()
        return [producer for producer in producers
                if now - producer.peer_info.last_update <= inactive_timeout
                and not producer.is_tombstoned(tombstone_lifetime, now)]


def _discard(index: dict, name, k: Registration) -> None:
    entries = index.get(name)
    if entries is not None:
        entries.pop(k, None)
        if not entries:
            del index[name]


def keys(registrations: list[Registration]) -> list[str]:
    return [k.key for k in registrations]


def subkeys(registrations: list[Registration]) -> list[str]:
    return [k.subkey for k in registrations]
