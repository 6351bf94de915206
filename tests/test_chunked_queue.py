"""nsqd/chunked_queue.py: a FIFO that behaves as a deque would, whose full blocks the cyclic
collector does not track."""

import gc
from collections import deque
from itertools import count, islice

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsqd.chunked_queue import BLOCK, ChunkedQueue
from nsqd.slices import RELEASE_STEP

STEPS = st.lists(st.one_of(
    st.tuples(st.just("extend"), st.integers(0, BLOCK + 300)),
    st.tuples(st.just("take"), st.integers(0, 2 * BLOCK + 100)),
    st.tuples(st.just("first"), st.just(0)),
    st.tuples(st.just("peek"), st.integers(0, 50)),
), max_size=40)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 1500), STEPS)
def test_it_behaves_as_a_deque(initial, steps):
    names = (f"m{number}".encode() for number in count())
    first = [next(names) for _ in range(initial)]
    model, queue = deque(first), ChunkedQueue(first)
    for step, size in steps:
        if step == "extend":
            messages = [next(names) for _ in range(size)]
            model.extend(messages)
            queue.extend(messages)
        elif step == "take":
            expected = [model.popleft() for _ in range(min(size, len(model)))]
            assert queue.take(size) == expected
        elif step == "first" and model:
            assert queue.first() == model[0]
        elif step == "peek":
            assert list(islice(queue, size)) == list(islice(model, size))
        assert len(queue) == len(model)
    assert list(queue) == list(model)


def test_a_take_is_a_list_the_caller_may_extend():
    queue = ChunkedQueue([b"a", b"b"])
    queue.extend((b"c",))
    taken = queue.take(1)
    taken += [b"x"]
    assert taken == [b"a", b"x"]
    assert list(queue) == [b"b", b"c"]


def test_a_released_queue_is_emptied_a_step_at_a_time():
    """nsqd frees an emptied queue's messages in steps (nsqd/slices.py): each step frees at most
    RELEASE_STEP of them, whatever the blocks."""
    queue = ChunkedQueue([b"m"] * (BLOCK + 1))
    queue.extend([b"n"] * (3 * BLOCK))  # one batch larger than a block
    queue.extend([b"o"] * 10)
    queue.take(BLOCK // 2)
    held = [len(queue)]
    for _ in queue.released_steps():
        held.append(len(queue))
    assert held[-1] == 0
    assert all(0 < before - after <= RELEASE_STEP for before, after in zip(held, held[1:]))
    assert len(held) - 1 == -(-held[0] // RELEASE_STEP)


class Counted:
    """A message that counts its deallocation."""
    freed = 0

    def __del__(self):
        Counted.freed += 1


def test_a_released_queue_frees_its_messages_a_step_at_a_time():
    """Each step frees the messages it released then, not a block of them at every block's end."""
    queue = ChunkedQueue([Counted() for _ in range(BLOCK + 1)])
    queue.extend([Counted() for _ in range(2 * BLOCK)])
    in_flight = queue.take(BLOCK // 2)  # held elsewhere, as nsqd's in-flight messages are
    Counted.freed = 0
    freed = []
    for _ in queue.released_steps():
        freed.append(Counted.freed)
        Counted.freed = 0
    assert sum(freed) == 3 * BLOCK + 1 - len(in_flight)
    assert all(0 < count <= RELEASE_STEP for count in freed), freed


def test_clear_empties_it_for_whoever_holds_it():
    queue = ChunkedQueue([b"m"] * (3 * BLOCK))
    queue.clear()
    assert len(queue) == 0 and list(queue) == []
    queue.extend([b"n"])
    assert queue.take(2) == [b"n"]


def test_the_collector_does_not_track_full_blocks():
    """What makes a full collection cheap: of 20 blocks of messages, only the ones messages are
    taken from and appended to are containers the collector walks item by item, at once (not
    only after a collection has looked at them)."""
    queue = ChunkedQueue([])
    for number in range(20 * BLOCK):
        queue.extend((f"message {number}".encode(),))
    queue.take(BLOCK // 2)
    containers = [referent for referent in gc.get_referents(queue) if isinstance(referent, (list, deque))]
    containers += [block for sealed in containers if isinstance(sealed, deque) for block in sealed]
    assert len(containers) > 18
    items_walked = sum(len(container) for container in containers if gc.is_tracked(container))
    assert items_walked < 3 * BLOCK, f"the collector walks {items_walked} items for {len(queue)} messages"
    assert len(queue) == 20 * BLOCK - BLOCK // 2


async def test_a_channels_deferred_heap_is_not_walked_by_the_collector(tmp_path):
    """A full collection with 1,000,000 deferred messages walked them one by one (120-280 ms): the
    heap stays untracked as it grows, and after a young collection its entries are untracked too."""
    from nsqd.nsqd import NSQD
    from nsqd.options import default_options

    channel = NSQD(default_options(data_path=str(tmp_path))).get_topic("t").get_channel("c")
    for number in range(3 * BLOCK):
        channel.defer(b"m" * 26 + number.to_bytes(4, "big"), 3600 + number % 7)
    gc.collect(0)
    heap = [referent for referent in gc.get_referents(channel) if isinstance(referent, list)
            and len(referent) == 3 * BLOCK]
    assert len(heap) == 1 and not gc.is_tracked(heap[0])
    assert sum(gc.is_tracked(entry) for entry in heap[0]) == 0
    assert [message[-4:] for _, message in channel.deferred_items()][:3] == [bytes(4), (7).to_bytes(4, "big"),
                                                                           (14).to_bytes(4, "big")]
