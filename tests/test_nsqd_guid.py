"""nsqd/guid.py: NSQ's message IDs, ((tick - twepoch) << 22) | (node << 12) | seq as 16 hex bytes
(NSQ's nsqd/guid.go)."""

import random
import re
import time

import pytest

from common.message import TIMESTAMP_ATTEMPTS
from nsqd.guid import ID_FORMAT, TWEPOCH, GuidFactory
from nsqd.message import new_messages

TICK_NS = 1 << 20  # ts = UnixNano >> 20


class FakeClock:
    """A settable UnixNano clock."""

    def __init__(self, ns: int):
        self.ns = ns

    def __call__(self) -> int:
        return self.ns


def at_tick(tick: int) -> FakeClock:
    return FakeClock(tick * TICK_NS + 12345)  # bits below the tick are dropped


def new_ids(factory: GuidFactory, count: int) -> list[bytes]:
    """``count`` fresh IDs as nsqd writes them into messages."""
    return [high + low for high, lows in factory.new_id_runs(count) for low in lows]


def new_id(factory: GuidFactory) -> bytes:
    return new_ids(factory, 1)[0]


def decode(guid: bytes) -> tuple[int, int, int]:
    """(tick, node, sequence) of an ID."""
    value = int(guid, 16)
    return (value >> 22) + TWEPOCH, (value >> 12) & 0x3FF, value & 0xFFF


def test_twepoch_is_nsqs():
    assert TWEPOCH == 1288834974288


def test_exact_hex_for_a_known_tick():
    factory = GuidFactory(1, clock_ns=at_tick(TWEPOCH + 1))
    assert new_id(factory) == b"0000000000401000"  # (1 << 22) | (1 << 12) | 0
    assert new_id(factory) == b"0000000000401001"


def test_exact_hex_with_every_field_set():
    tick = TWEPOCH + 0xABCDE
    factory = GuidFactory(1023, clock_ns=at_tick(tick))
    ids = new_ids(factory, 3)  # 0xabcde << 22 == 0x2af37800000, 1023 << 12 == 0x3ff000
    assert ids == [b"000002af37bff000", b"000002af37bff001", b"000002af37bff002"]


def test_ids_are_16_lowercase_hex_bytes():
    factory = GuidFactory(1023, clock_ns=at_tick(time.time_ns() >> 20))
    for guid in new_ids(factory, 100):
        assert type(guid) is bytes
        assert re.fullmatch(rb"[0-9a-f]{16}", guid)


@pytest.mark.parametrize("node", [0, 1, 512, 1023])
def test_ids_decode_to_tick_node_and_sequence(node):
    tick = time.time_ns() >> 20
    factory = GuidFactory(node, clock_ns=at_tick(tick))
    assert [decode(guid) for guid in new_ids(factory, 5)] == [(tick, node, seq) for seq in range(5)]


def test_sequence_restarts_in_a_new_tick():
    clock = at_tick(TWEPOCH + 1000)
    factory = GuidFactory(3, clock_ns=clock)
    new_ids(factory, 10)
    clock.ns += TICK_NS
    assert decode(new_id(factory)) == (TWEPOCH + 1001, 3, 0)


@pytest.mark.parametrize("node", [-1, 1024, 5000])
def test_node_id_out_of_range(node):
    with pytest.raises(ValueError, match=r"\[0,1024\)"):
        GuidFactory(node)


def test_strictly_increasing_as_the_clock_moves():
    rng = random.Random(7)
    clock = at_tick(time.time_ns() >> 20)
    factory = GuidFactory(9, clock_ns=clock)
    ids = []
    for _ in range(2000):
        clock.ns += rng.choice([0, 0, 1, 1000, TICK_NS, 5 * TICK_NS])
        ids += new_ids(factory, rng.randint(1, 3))
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [int(guid, 16) for guid in ids] == sorted(int(guid, 16) for guid in ids)


def test_more_than_4096_ids_in_one_tick_stay_unique_and_increasing():
    tick = time.time_ns() >> 20
    factory = GuidFactory(5, clock_ns=at_tick(tick))
    ids = [new_id(factory) for _ in range(10000)]
    assert len(set(ids)) == 10000 and ids == sorted(ids)
    assert decode(ids[4095]) == (tick, 5, 4095)
    assert decode(ids[4096]) == (tick + 1, 5, 0)  # the next tick is borrowed
    assert decode(ids[9999]) == (tick + 2, 5, 9999 - 8192)


def test_a_large_batch_spans_ticks():
    tick = time.time_ns() >> 20
    factory = GuidFactory(5, clock_ns=at_tick(tick))
    first = new_ids(factory, 3)
    batch = new_ids(factory, 5000)
    assert len(batch) == 5000 and len(set(first + batch)) == 5003
    assert first + batch == sorted(first + batch)
    assert decode(batch[-1])[0] > tick


def test_messages_of_a_batch_spanning_ticks_keep_their_bodies_and_get_their_ids():
    """nsqd/message.py joins each message from its run's shared digits: across two runs of IDs,
    every body keeps its place and gets the ID the whole number formats to."""
    tick = TWEPOCH + 0xABCDE
    factory = GuidFactory(1023, clock_ns=at_tick(tick))
    bodies = [b"body %d" % number for number in range(5000)]
    messages = new_messages(factory, 123456789, bodies)
    assert [message[26:] for message in messages] == bodies
    assert {message[:10] for message in messages} == {TIMESTAMP_ATTEMPTS.pack(123456789, 0)}
    numbers = [((tick - TWEPOCH) << 22) | (1023 << 12) | sequence for sequence in range(4096)]
    numbers += [((tick + 1 - TWEPOCH) << 22) | (1023 << 12) | sequence for sequence in range(904)]
    assert [message[10:26] for message in messages] == [ID_FORMAT % number for number in numbers]


def test_borrowed_tick_is_continued_when_the_clock_catches_up():
    clock = at_tick(TWEPOCH + 50)
    factory = GuidFactory(0, clock_ns=clock)
    before = new_ids(factory, 4096 + 10)  # 10 ids from tick 51
    clock.ns += TICK_NS
    after = new_id(factory)
    assert decode(after) == (TWEPOCH + 51, 0, 10)
    assert after > before[-1]


def test_clock_going_backwards_stays_unique_and_increasing():
    clock = at_tick(time.time_ns() >> 20)
    factory = GuidFactory(2, clock_ns=clock)
    ids = new_ids(factory, 5)
    clock.ns -= 10 * TICK_NS
    ids += new_ids(factory, 5)
    clock.ns -= 3600 * 10**9
    ids += [new_id(factory) for _ in range(5000)]
    assert len(set(ids)) == len(ids) and ids == sorted(ids)


def test_new_ids_zero():
    assert new_ids(GuidFactory(1, clock_ns=at_tick(TWEPOCH + 1)), 0) == []


def test_default_clock_is_the_wall_clock():
    before = time.time_ns() >> 20
    tick, node, _ = decode(new_id(GuidFactory(77)))
    assert before <= tick <= (time.time_ns() >> 20)
    assert node == 77
