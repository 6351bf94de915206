"""nsqlookupd/registration_db.py with an injected clock (NSQ v1.3's nsqlookupd/registration_db.go)."""

from nsqlookupd.registration_db import (
    CLIENT, GO_ZERO_TIME_UNIX_NANO, PeerInfo, Producer, Registration, RegistrationDB, channel_registration, keys,
    subkeys, topic_registration,
)

SECOND = 10**9
INACTIVE = 300 * SECOND
TOMBSTONE = 45 * SECOND


class Clock:
    def __init__(self, now: int = 1_700_000_000 * SECOND):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += round(seconds * SECOND)


def peer(db: RegistrationDB, n: int) -> PeerInfo:
    return PeerInfo(f"10.0.0.{n}:5000{n}", f"10.0.0.{n}:5000{n}", f"host{n}", f"b{n}", 4150 + n, 4151 + n,
                    "1.3.0", last_update=db.clock())


def register(db: RegistrationDB, info: PeerInfo, topic: str, channel: str = "") -> None:
    db.register(info, topic, channel)


def test_add_producer_once_per_peer_and_keys_stay_when_empty():
    db = RegistrationDB(Clock())
    p1 = peer(db, 1)
    assert db.add_producer(topic_registration("t"), Producer(p1))
    assert not db.add_producer(topic_registration("t"), Producer(p1))  # same peer: no-op
    assert [p.peer_info for p in db.find_producers("topic", "t", "")] == [p1]
    assert db.remove_producer(topic_registration("t"), p1.id) == (True, 0)
    assert db.remove_producer(topic_registration("t"), p1.id) == (False, 0)
    assert db.find_registrations("topic", "t", "") == [topic_registration("t")]  # the key stays
    assert db.remove_producer(topic_registration("missing"), p1.id) == (False, 0)


def test_readding_does_not_clear_a_tombstone():
    clock = Clock()
    db = RegistrationDB(clock)
    p1 = peer(db, 1)
    register(db, p1, "t")
    db.find_producers("topic", "t", "")[0].tombstone(clock())
    register(db, p1, "t")
    assert db.find_producers("topic", "t", "")[0].tombstoned


def test_wildcard_queries():
    db = RegistrationDB(Clock())
    p1, p2 = peer(db, 1), peer(db, 2)
    db.add_producer(CLIENT, Producer(p1))
    db.add_producer(CLIENT, Producer(p2))
    register(db, p1, "a", "c1")
    register(db, p1, "a", "c2")
    register(db, p2, "a", "c2")
    register(db, p2, "b", "c1")
    db.add_registration(topic_registration("empty"))
    assert keys(db.find_registrations("topic", "*", "")) == ["a", "b", "empty"]
    assert subkeys(db.find_registrations("channel", "a", "*")) == ["c1", "c2"]
    assert db.find_registrations("channel", "*", "c1") == [channel_registration("a", "c1"), channel_registration("b", "c1")]
    assert len(db.find_registrations("channel", "*", "*")) == 3
    assert db.find_registrations("channel", "a", "c3") == []
    assert db.find_registrations("topic", "a", "*") == [topic_registration("a")]
    # One producer per peer across matching keys.
    assert [p.peer_info for p in db.find_producers("channel", "*", "*")] == [p1, p2]
    assert [p.peer_info for p in db.find_producers("topic", "*", "")] == [p1, p2]
    assert [p.peer_info for p in db.find_producers("channel", "a", "*")] == [p1, p2]
    assert db.find_producers("topic", "empty", "") == []
    assert Registration("channel", "a", "c1").matches("channel", "*", "c1")
    assert not Registration("channel", "a", "c1").matches("topic", "*", "*")


def test_lookup_registrations_and_peer_removal():
    db = RegistrationDB(Clock())
    p1, p2 = peer(db, 1), peer(db, 2)
    db.add_producer(CLIENT, Producer(p1))
    register(db, p1, "a", "c")
    register(db, p2, "a", "c")
    assert db.lookup_registrations(p1.id) == [CLIENT, channel_registration("a", "c"), topic_registration("a")]
    for k in db.lookup_registrations(p1.id):  # what a disconnect does
        db.remove_producer(k, p1.id)
    assert db.lookup_registrations(p1.id) == []
    assert [p.peer_info for p in db.find_producers("topic", "a", "")] == [p2]
    assert [p.peer_info for p in db.find_producers("channel", "a", "c")] == [p2]
    assert db.find_registrations("client", "", "") == [CLIENT]


def test_remove_registration_drops_its_producers_and_indexes():
    db = RegistrationDB(Clock())
    p1 = peer(db, 1)
    register(db, p1, "a", "c")
    db.remove_registration(channel_registration("a", "c"))
    db.remove_registration(channel_registration("a", "c"))  # twice is harmless
    assert db.find_registrations("channel", "a", "*") == []
    assert db.find_registrations("channel", "*", "*") == []
    assert db.lookup_registrations(p1.id) == [topic_registration("a")]
    register(db, p1, "a", "c")  # and it can come back
    assert subkeys(db.find_registrations("channel", "a", "*")) == ["c"]
    assert len(db) == 2


def test_inactive_producers_are_filtered_after_the_timeout():
    clock = Clock()
    db = RegistrationDB(clock)
    p1, p2 = peer(db, 1), peer(db, 2)
    register(db, p1, "t")
    register(db, p2, "t")
    clock.advance(200)
    p2.last_update = clock()  # p2 pings
    clock.advance(100)
    # p1: exactly 300 s since its last update is still active (NSQ: inactive when "> timeout").
    assert [p.peer_info for p in db.filter_active(db.find_producers("topic", "t", ""), INACTIVE, TOMBSTONE)] == [p1, p2]
    clock.advance(0.001)
    assert [p.peer_info for p in db.filter_active(db.find_producers("topic", "t", ""), INACTIVE, TOMBSTONE)] == [p2]
    clock.advance(300)
    assert db.filter_active(db.find_producers("topic", "t", ""), INACTIVE, TOMBSTONE) == []
    assert len(db.find_producers("topic", "t", "")) == 2  # hidden, not removed


def test_tombstones_hide_a_producer_per_topic_for_their_lifetime():
    clock = Clock()
    db = RegistrationDB(clock)
    p1, p2 = peer(db, 1), peer(db, 2)
    register(db, p1, "t")
    register(db, p1, "u")
    register(db, p2, "t")
    producer = db.find_producers("topic", "t", "")[0]
    assert producer.tombstoned_at == GO_ZERO_TIME_UNIX_NANO
    producer.tombstone(clock())
    assert producer.tombstoned and producer.tombstoned_at == clock()

    def active(topic: str) -> list[PeerInfo]:
        return [p.peer_info for p in db.filter_active(db.find_producers("topic", topic, ""), INACTIVE, TOMBSTONE)]

    assert active("t") == [p2]
    assert active("u") == [p1]  # a tombstone is per (peer, topic)
    # Lifetime 0 ignores tombstones (what /nodes asks for).
    assert [p.peer_info for p in db.filter_active(db.find_producers("topic", "t", ""), INACTIVE, 0)] == [p1, p2]
    clock.advance(44.999)
    p1.last_update = p2.last_update = clock()
    assert active("t") == [p2]
    clock.advance(0.001)
    assert active("t") == [p1, p2]  # tombstoned 45 s ago: visible again
    assert producer.tombstoned  # the flag stays, only its effect expires


def test_register_joins_channel_and_topic_each_with_its_own_producer():
    db = RegistrationDB(Clock())
    p1 = peer(db, 1)
    assert db.register(p1, "t", "c") == [channel_registration("t", "c"), topic_registration("t")]
    assert db.register(p1, "t", "c") == []
    assert db.register(p1, "t", "d") == [channel_registration("t", "d")]
    assert db.register(p1, "u") == [topic_registration("u")]
    channel_producer = db.find_producers("channel", "t", "c")[0]
    topic_producer = db.find_producers("topic", "t", "")[0]
    assert channel_producer is not topic_producer and channel_producer.peer_info is topic_producer.peer_info


def test_unregister_channel_removes_an_ephemeral_key_with_its_last_producer():
    db = RegistrationDB(Clock())
    p1, p2 = peer(db, 1), peer(db, 2)
    register(db, p1, "t", "c#ephemeral")
    register(db, p2, "t", "c#ephemeral")
    register(db, p1, "t", "durable")
    assert db.unregister(p1.id, "t", "c#ephemeral") == ([channel_registration("t", "c#ephemeral")], [])
    assert subkeys(db.find_registrations("channel", "t", "*")) == ["c#ephemeral", "durable"]  # p2 still there
    assert db.unregister(p2.id, "t", "c#ephemeral") == ([channel_registration("t", "c#ephemeral")], [])
    assert subkeys(db.find_registrations("channel", "t", "*")) == ["durable"]
    assert db.unregister(p1.id, "t", "durable") == ([channel_registration("t", "durable")], [])
    assert subkeys(db.find_registrations("channel", "t", "*")) == ["durable"]  # not ephemeral: the key stays
    assert db.unregister(p1.id, "t", "never#ephemeral") == ([], [])


def test_unregister_topic_leaves_its_channels_and_removes_an_ephemeral_topic():
    db = RegistrationDB(Clock())
    p1 = peer(db, 1)
    register(db, p1, "t", "c")
    register(db, p1, "e#ephemeral", "c#ephemeral")
    removed, unexpected = db.unregister(p1.id, "t")
    assert (removed, unexpected) == ([topic_registration("t")], [channel_registration("t", "c")])
    assert keys(db.find_registrations("topic", "*", "")) == ["t", "e#ephemeral"]
    assert db.find_producers("channel", "t", "c") == []
    db.unregister(p1.id, "e#ephemeral")
    assert keys(db.find_registrations("topic", "*", "")) == ["t"]
    # The ephemeral channel's key is only emptied by a topic unregistration, not removed (as NSQ).
    assert subkeys(db.find_registrations("channel", "e#ephemeral", "*")) == ["c#ephemeral"]


def test_remove_peer_leaves_every_key_but_keeps_the_keys():
    db = RegistrationDB(Clock())
    p1, p2 = peer(db, 1), peer(db, 2)
    db.add_producer(CLIENT, Producer(p1))
    register(db, p1, "t", "c#ephemeral")
    register(db, p2, "t")
    assert db.remove_peer(p1.id) == [CLIENT, channel_registration("t", "c#ephemeral"), topic_registration("t")]
    assert db.remove_peer(p1.id) == []
    assert db.lookup_registrations(p1.id) == []
    assert [p.peer_info for p in db.find_producers("topic", "t", "")] == [p2]
    assert subkeys(db.find_registrations("channel", "t", "*")) == ["c#ephemeral"]
