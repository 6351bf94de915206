"""nsqd killed with -9 at chosen and at random points, restarted on the same data directory.

The regression test of issue 25's bug comes first: with ``--persist-deferred
--mem-queue-size=0`` a message read from the disk queue and REQ'd with a delay was, after a
kill -9 before the queue's next sync, delivered early from the disk queue's older copy and
again when due. Then what the random loop found (tests/crash_points.py), then the loop
itself: 20 kill -9 points with ``--mem-queue-size=0 --sync-every=1 --persist-deferred``, 6
with default flags (``CRASH_SEED``, ``CRASH_LIVES``, ``CRASH_LIVES_DEFAULT`` to repeat or
lengthen a run; bench/bench_crash_points.py runs 500)."""

import os
import random
import time

from nsqd.held_file import MAGIC
from nsqd.held_file import record as side_record

from .crash_points import crash_loop, summary
from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import (Server, create_channel, data_file, dpub, meta_file, meta_text, payload, publish, receive,
                      record, subscribe, wait_until)
from .helpers import RawClient
from .test_nsqd_deferred_store import side_records

# no sync and no tidying while the test runs: the crash falls between a read and the next sync
NO_SYNC = ("--persist-deferred", "--mem-queue-size=0", "--sync-timeout=60s")


def record_kinds(path) -> list[bytes]:
    """The kinds of a side file's records ([] while it is missing or being created)."""
    if not path.exists() or path.stat().st_size < 8:
        return []
    return [kind for kind, _, _ in side_records(path)]


async def test_a_message_deferred_after_a_read_from_disk_is_not_delivered_early_after_a_kill_9(tmp_path):
    server = Server(tmp_path, *NO_SYNC)
    await subscribe(server.tcp_port, "jobs", "workers")  # the channel exists: the message goes to its disk queue
    await publish(server.tcp_port, "jobs", [b"later"])
    consumer = await subscribe(server.tcp_port, "jobs", "workers", rdy=1)
    [first] = await receive(consumer, 1)
    await consumer.send(b"REQ " + first.id + b" 2500\n")
    deferred_at = time.time()
    deferred = tmp_path / "jobs:workers.deferred.dat"
    await wait_until(lambda: record_kinds(deferred) == [b"D"], what="the deferral written")
    server.kill()

    server = Server(tmp_path, *NO_SYNC)
    consumer = await subscribe(server.tcp_port, "jobs", "workers", rdy=10)
    [again] = await receive(consumer, 1, timeout=10)
    assert time.time() >= deferred_at + 2.5 - 0.05, "delivered before its due time"
    assert (again.id, again.body, again.attempts) == (first.id, b"later", 2)
    await consumer.send(b"FIN " + again.id + b"\n")
    await consumer.assert_no_frame(1.0)  # and only once
    assert server.stop() == 0



async def test_messages_a_topic_handed_on_before_a_kill_9_are_not_handed_on_again(tmp_path):
    """The topic's disk queue is read further than its metadata says (no sync since): the
    position recorded in ``<topic>.inflight.dat`` after the hand-on skips them at the start,
    so each comes back once (from the channel's in-flight file: FINished since the last
    tidying), not once more from the topic with fewer attempts."""
    server = Server(tmp_path, *NO_SYNC)
    await publish(server.tcp_port, "t", [b"one", b"two", b"three"])  # no channel yet: the topic's disk queue
    consumer = await subscribe(server.tcp_port, "t", "c", rdy=3)
    received = await receive(consumer, 3)
    await consumer.send(b"".join(b"FIN " + m.id + b"\n" for m in received))
    handed = tmp_path / "t.inflight.dat"
    await wait_until(lambda: record_kinds(handed) == [b"P"], what="the position")
    await wait_until(lambda: b'"c"' in (tmp_path / "nsqd.dat").read_bytes(), what="nsqd.dat")
    server.kill()

    server = Server(tmp_path, *NO_SYNC)
    assert "t: 3 messages handed on before an unclean stop skipped" in server.log()
    consumer = await subscribe(server.tcp_port, "t", "c", rdy=10)
    again = await receive(consumer, 3)
    assert sorted((m.body, m.attempts) for m in again) == [(b"one", 2), (b"three", 2), (b"two", 2)]
    await consumer.send(b"".join(b"FIN " + m.id + b"\n" for m in again))
    await consumer.assert_no_frame(1.0)
    assert server.stop() == 0


def without_last_gone(path) -> None:
    """The side file as it was before its last record, an ``X`` (a kill -9 came just before
    nsqd wrote it: what the other files hold was written first)."""
    records = side_records(path)
    assert records and records[-1][0] == b"X", records
    path.write_bytes(MAGIC + b"".join(side_record(kind, value, data) for kind, value, data in records[:-1]))


async def assert_delivered_once(server: Server, topic: str, channel: str, expected: list[tuple[bytes, int]]):
    consumer = await subscribe(server.tcp_port, topic, channel, rdy=10)
    received = await receive(consumer, len(expected))
    assert sorted((m.body, m.attempts) for m in received) == expected
    await consumer.send(b"".join(b"FIN " + m.id + b"\n" for m in received))
    await consumer.assert_no_frame(1.0)  # and no second copy
    assert server.stop() == 0


async def test_a_batch_a_kill_9_cut_short_between_a_channel_and_its_topic_is_not_handed_on_twice(tmp_path):
    """Found by the loop below: the topic's pump writes a batch to a channel's disk queue, then
    records how far it read its own; a kill -9 between the two left the batch in the channel
    (after its last sync) and the topic handed it on again at the start: two copies of each,
    both never delivered. The channel now takes none of the topic's first batch that it holds."""
    server = Server(tmp_path, *NO_SYNC)
    await publish(server.tcp_port, "t", [b"one", b"two", b"three"])  # no channel yet: the topic's disk queue
    await create_channel(server.tcp_port, "t", "c")
    handed = tmp_path / "t.inflight.dat"
    await wait_until(lambda: record_kinds(handed) == [b"P"], what="the topic's position")
    await wait_until(lambda: b'"c"' in (tmp_path / "nsqd.dat").read_bytes(), what="nsqd.dat")
    server.kill()
    handed.unlink()  # the topic's record was the first it made

    server = Server(tmp_path, *NO_SYNC)
    assert "CHANNEL(t:c): 3 messages of the topic's first batch held already" in server.log()
    await assert_delivered_once(server, "t", "c", [(b"one", 1), (b"three", 1), (b"two", 1)])


async def test_a_message_requeued_into_the_disk_queue_just_before_a_kill_9_comes_back_once(tmp_path):
    """Found by the loop below: REQ writes the message into the disk queue, then its end in the
    in-flight file; a kill -9 between the two left both the disk queue's copy and the record
    of its delivery, which queued a second copy at the start."""
    server = Server(tmp_path, *NO_SYNC)
    consumer = await subscribe(server.tcp_port, "t", "c", rdy=1)
    await publish(server.tcp_port, "t", [b"again"])
    [first] = await receive(consumer, 1)
    await consumer.send(b"RDY 0\nREQ " + first.id + b" 0\n")  # not ready: into the disk queue
    in_flight = tmp_path / "t:c.inflight.dat"
    await wait_until(lambda: record_kinds(in_flight)[-1:] == [b"X"], what="the requeue's record")
    server.kill()
    without_last_gone(in_flight)

    await assert_delivered_once(Server(tmp_path, *NO_SYNC), "t", "c", [(b"again", 2)])


async def test_a_deferred_message_that_came_due_into_the_disk_queue_just_before_a_kill_9_comes_back_once(tmp_path):
    """Found by the loop below: a deferral that comes due while no consumer is ready goes into
    the disk queue, then its end is written to the in-flight and the deferred files; a kill
    -9 before those left it deferred as well, delivered twice."""
    server = Server(tmp_path, *NO_SYNC)
    await create_channel(server.tcp_port, "t", "c")
    await wait_until(lambda: b'"c"' in (tmp_path / "nsqd.dat").read_bytes(), what="nsqd.dat")
    producer = await RawClient.connect(server.tcp_port)
    await producer.send(dpub("t", 100, b"due"))
    assert await producer.read_response() == b"OK"
    await producer.close()
    deferred, in_flight = tmp_path / "t:c.deferred.dat", tmp_path / "t:c.inflight.dat"
    await wait_until(lambda: record_kinds(deferred) == [b"D", b"X"], what="the deferral's end")
    server.kill()
    without_last_gone(deferred)
    without_last_gone(in_flight)

    await assert_delivered_once(Server(tmp_path, *NO_SYNC), "t", "c", [(b"due", 1)])


def test_a_write_file_removed_before_the_metadata_knew_is_not_written_into(tmp_path):
    """Found by the loop below: the metadata names a write file that was read to its end and
    removed (and a later one holds records) after a kill -9 that came before the next sync.
    Writing there at the old position left a hole of zeros that read as a corrupt file, so
    the new record and the later file's were lost; go-diskqueue v1.1.0 does the same."""
    from nsqd.diskqueue import DiskQueue

    later = [payload(b"later %d" % n, b"%016x" % n) for n in range(3)]
    with open(data_file(tmp_path, "t", 1), "wb") as handle:
        handle.write(b"".join(map(record, later)))
    with open(meta_file(tmp_path, "t"), "w") as handle:
        handle.write(meta_text(5, (0, 120), (0, 6790)))  # file 0 is gone
    queue = DiskQueue("t", str(tmp_path), 1 << 20, 26, 1 << 20)
    queue.put([payload(b"new", b"%016x" % 9)])
    assert [m[26:] for m in queue.read(10)] == [b"later 0", b"later 1", b"later 2", b"new"]
    assert not os.path.exists(data_file(tmp_path, "t", 0))
    queue.close()


async def test_random_kill_9_points_under_a_mixed_load_write_through(tmp_path):
    seed = int(os.environ.get("CRASH_SEED", random.randrange(1 << 30)))
    started = time.monotonic()
    run = await crash_loop(tmp_path / "data", strict=True, lives=int(os.environ.get("CRASH_LIVES", 20)), seed=seed)
    print(summary(run, time.monotonic() - started))
    found = run.model.violations(final=True)
    assert not found, f"seed {seed}:\n" + "\n".join(found[:40])
    assert run.go_skipped is not None or run.go_checks == run.lives


async def test_random_kill_9_points_under_a_mixed_load_default_flags(tmp_path):
    seed = int(os.environ.get("CRASH_SEED", random.randrange(1 << 30)))
    started = time.monotonic()
    run = await crash_loop(tmp_path / "data", strict=False, lives=int(os.environ.get("CRASH_LIVES_DEFAULT", 6)),
                           seed=seed)
    print(summary(run, time.monotonic() - started))
    found = run.model.violations(final=True)
    assert not found, f"seed {seed}:\n" + "\n".join(found[:40])
    assert run.go_skipped is not None or run.go_checks == run.lives
    assert run.model.kept_on_disk, "no message was known to be on disk: the check checked nothing"
