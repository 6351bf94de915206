"""What an idle topic or channel costs nsqd: no task of its own (bench/bench_scale.py measures the
memory). A topic's pump runs only while it has a backlog to hand on, and the channels' deferred
messages share one timer (nsqd/deferred_timer.py), which lets go of a deleted channel at once. Nor
does the disk queues' sync loop wake while no queue has been read or written since its last round."""

import gc
import time
import weakref

import trio

from .helpers import settled_task_count, task_count
from .waiting import await_until


async def test_idle_topics_and_channels_run_no_task(nsqd):
    tasks = await settled_task_count()
    for index in range(20):
        topic = nsqd.get_topic(f"idle{index}")
        for name in ("a", "b"):
            topic.get_channel(name)
    assert len(nsqd.topics) == 20
    await await_until(lambda: task_count() == tasks, what="as many tasks as before the 60 topics and channels")


async def test_a_backlog_is_pumped_to_a_new_channel_and_then_the_pump_ends(nsqd):
    topic = nsqd.get_topic("backlog")
    topic.publish([b"%d" % i for i in range(2500)], time.time_ns())  # more than one pump batch
    tasks = await settled_task_count()
    channel = topic.get_channel("c")
    assert task_count() == tasks + 1  # the pump
    await await_until(lambda: (topic.depth, channel.depth) == (0, 2500), what="the backlog in the channel")
    await await_until(lambda: task_count() == tasks, what="the pump ended")
    assert [message[26:] for message in channel.queue.take(3)] == [b"0", b"1", b"2"]


async def test_a_paused_topic_pumps_its_backlog_once_unpaused(nsqd):
    topic = nsqd.get_topic("paused")
    channel = topic.get_channel("c")
    topic.pause()
    topic.publish([b"held"], time.time_ns())
    tasks = await settled_task_count()
    assert (topic.depth, channel.depth) == (1, 0)
    topic.unpause()
    await await_until(lambda: (topic.depth, channel.depth) == (0, 1), what="the held message in the channel")
    await await_until(lambda: task_count() == tasks, what="the pump ended")


async def test_deferred_messages_come_due_in_each_channel_and_a_deleted_channel_is_let_go(nsqd):
    topic = nsqd.get_topic("deferring")
    soon, later = topic.get_channel("soon"), topic.get_channel("later")
    soon.defer(b"x" * 26 + b"soon", 0.05)
    later.defer(b"x" * 26 + b"later", 3600)
    await await_until(lambda: soon.depth == 1, what="the message deferred 50 ms in its channel")
    assert (soon.deferred_count, later.deferred_count, later.depth) == (0, 1, 0)
    gone = weakref.ref(later)
    del later
    topic.delete_channel("later")
    gc.collect()
    assert gone() is None


async def test_the_sync_loop_sleeps_while_no_disk_queue_is_used_and_syncs_a_write_within_the_timeout(start_nsqd):
    nsqd = await start_nsqd(sync_timeout=0.05, mem_queue_size=0)
    nsqd.get_topic("synced").get_channel("c")  # new disk queues count as used
    await await_until(lambda: not nsqd._used, what="the timed round after the new queues")
    rounds = nsqd.group_commit.rounds
    await trio.sleep(0.5)  # ten --sync-timeouts with nothing read or written
    assert nsqd.group_commit.rounds == rounds
    queue = nsqd.topics["synced"].channels["c"].queue.backend
    nsqd.topics["synced"].publish([b"to disk"], time.time_ns())
    await await_until(lambda: (queue.depth, queue.writes_since_sync) == (1, 0) and nsqd.group_commit.rounds > rounds,
                      what="the message on disk, fsynced by a timed round")
