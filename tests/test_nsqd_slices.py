"""Long answers built in slices (nsqd/slices.py): the same bytes as built at once, and the event
loop serves others between the slices."""

import json
import time

import trio

from common import gojson
from nsqd import metadata, stats
from nsqd.slices import SLICE_SECONDS, at_once, in_slices


def busy_steps(steps: int, seconds: float):
    for _ in range(steps):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        yield
    return "done"


async def test_in_slices_lets_other_tasks_run_between_slices_and_returns_the_result():
    ran_between: list[float] = []
    longest_hold = 0.0

    async def other() -> None:
        nonlocal longest_hold
        last = time.perf_counter()
        while True:
            await trio.sleep(0)
            now = time.perf_counter()
            longest_hold = max(longest_hold, now - last)
            ran_between.append(now)
            last = now

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await trio.sleep(0)
        result = await in_slices(busy_steps(100, SLICE_SECONDS / 4))  # 25 slices' worth of work
        nursery.cancel_scope.cancel()
    assert result == "done"
    assert len(ran_between) >= 20
    assert longest_hold < 0.25  # a failure bound only: at once it would be the whole 25 slices plus


class StepsBetweenPolls(trio.abc.Instrument):
    """The steps the works in slices took between two polls of the loop for I/O, poll by poll."""

    def __init__(self):
        self.counts = [0]

    def after_io_wait(self, timeout: float) -> None:
        self.counts.append(0)

    def count(self, steps):
        for step in steps:
            self.counts[-1] += 1
            yield step
        return "done"


async def test_works_in_slices_at_once_share_one_slice_between_polls():
    """Two works of quarter-slice steps: between two polls the loop runs at most a slice of them,
    plus one step of the work that finds the slice spent (each slice its own: eight steps). Steps
    only take longer on a busy machine, so the bound holds there too."""
    polls = StepsBetweenPolls()
    trio.lowlevel.add_instrument(polls)
    try:
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(in_slices, polls.count(busy_steps(40, SLICE_SECONDS / 4)))
    finally:
        trio.lowlevel.remove_instrument(polls)
    assert sum(polls.counts) == 80
    assert max(polls.counts) <= 5, polls.counts


def test_at_once_runs_every_step():
    assert at_once(busy_steps(3, 0)) == "done"


def document(topics):
    return {"version": "1.3.0", "health": "OK", "start_time": 1, "topics": topics,
            "memory": {"heap_objects": 5}, "producers": None}


def test_the_stats_json_in_steps_is_gojsons_bytes():
    topic = {"topic_name": "t<&>", "channels": [{"channel_name": "c\u2028", "depth": 1, "e2e": 0.5}],
             "paused": False, "e2e_processing_latency": {"count": 0, "percentiles": None}}
    for topics in (None, [], [topic], [topic, dict(topic, topic_name="u")]):
        assert b"".join(at_once(stats.json_steps(document(topics)))) == gojson.dumps(document(topics))


def test_nsqd_dat_in_steps_is_json_dumps_bytes_of_the_whole_document():
    topics = [metadata.TopicMeta("t", False, [metadata.ChannelMeta("c", True, {"max_attempts": 3})], {"msg_ttl": 5}),
              metadata.TopicMeta("u", True, [])]
    for chosen in ([], topics):
        whole = {"topics": [{"name": topic.name, "paused": topic.paused,
                             "channels": [{"name": ch.name, "paused": ch.paused, **ch.extras}
                                          for ch in topic.channels] or None, **topic.extras}
                            for topic in chosen] or None, "version": "1.3.0"}
        assert metadata.encode(chosen) == json.dumps(whole, separators=(",", ":")).encode()


def test_nsqd_dat_reencodes_only_the_topics_whose_metadata_changed(monkeypatch):
    """Each rewrite gives the bytes of encoding the whole snapshot afresh, but json.dumps runs only
    for the topics that are new or whose metadata differs from the rewrite before."""
    encoded = []
    entry_text = metadata._entry_text
    monkeypatch.setattr(metadata, "_entry_text", lambda topic: encoded.append(topic.name) or entry_text(topic))
    channel = metadata.ChannelMeta("c", False)
    versions = [
        ([metadata.TopicMeta("t", False, (channel,)), metadata.TopicMeta("u", False, ())], ["t", "u"]),
        ([metadata.TopicMeta("t", False, (channel,)), metadata.TopicMeta("u", True, ())], ["u"]),
        ([metadata.TopicMeta("t", False, (channel._replace(paused=True),)), metadata.TopicMeta("u", True, ())], ["t"]),
        ([metadata.TopicMeta("t", False, (channel._replace(paused=True),), {"msg_ttl": 5})], ["t"]),
        ([metadata.TopicMeta("u", True, ()), metadata.TopicMeta("t", False, (channel._replace(paused=True),),
                                                                {"msg_ttl": 5})], ["u"]),
        ([metadata.TopicMeta("u", True, ()), metadata.TopicMeta("t", False, (channel._replace(paused=True),),
                                                                {"msg_ttl": 5})], []),
    ]
    entries = metadata.EncodedEntries()
    for topics, reencoded in versions:
        encoded.clear()
        written = b"".join(at_once(entries.steps(topics)))
        assert encoded == reencoded
        assert written == metadata.encode(topics)
        assert json.loads(written)["topics"] == [json.loads(entry_text(topic)) for topic in topics]


def test_the_collector_is_held_while_works_in_slices_run_and_left_as_it_was():
    import gc
    from collections import deque

    from nsqd.slices import RELEASE_STEP, collector_held, released_steps

    assert gc.isenabled()
    with collector_held():
        with collector_held():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_held():
            pass
        assert not gc.isenabled()  # off before, off after
    finally:
        gc.enable()
    items = deque(range(2500))
    assert sum(1 for _ in released_steps(items)) == -(-2500 // RELEASE_STEP) and not items


async def test_a_paced_work_sleeps_between_its_steps():
    from nsqd.slices import paced

    started = trio.current_time()
    assert await paced(busy_steps(5, 0), 0.01) == "done"
    assert trio.current_time() - started >= 0.05


def test_allocated_blocks_are_counted_again_after_a_while_or_a_full_collection(monkeypatch):
    import gc
    import sys

    from nsqd.stats import AllocatedBlocks

    counts = iter(range(100, 200))
    monkeypatch.setattr(sys, "getallocatedblocks", lambda: next(counts))
    blocks = AllocatedBlocks()
    assert blocks.value() == 100
    assert blocks.value() == 100  # not counted again at once: the count walks every pool
    gc.collect()
    assert blocks.value() == 101
    blocks.counted_at -= AllocatedBlocks.REFRESH
    assert blocks.value() == 102
