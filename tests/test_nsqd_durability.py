"""Messages survive nsqd restarts, in go-diskqueue v1.1.0's on-disk format
(nsqd/diskqueue.py, go-diskqueue's diskqueue.go).

Each restart test runs a real ``python -m nsqd`` process, stops it (SIGTERM / SIGINT, or
SIGKILL for an unclean stop) and starts a new one on the same --data-path. Bodies are
compared as multisets: order is not part of NSQ's guarantees, loss and duplication are.
"""

import os
import signal
import stat
import struct
import time
from collections import Counter

import httpx
import pytest
import trio

from nsqd.nsqd import NSQD
from nsqd.options import default_options

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import (
    Server, bodies, check_message, create_channel, data_file, dpub, drain, meta_file, meta_text, multiset, parse_meta,
    payload, publish, queue_files, queued_messages, receive, record, restart, subscribe, wait_until,
)
from .helpers import RawClient


# -- graceful restarts -------------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_memory_backlog_survives_a_graceful_stop(tmp_path, signum):
    server = Server(tmp_path)
    await create_channel(server.tcp_port, "mem", "c")
    await publish(server.tcp_port, "mem", bodies("chan", 20))       # waits in the channel's memory
    await publish(server.tcp_port, "lonely", bodies("topic", 20))   # no channel: the topic's memory
    assert queue_files(tmp_path, "mem:c") == [] and queue_files(tmp_path, "lonely") == []

    server = restart(server, signum=signum)
    assert multiset(await drain(server.tcp_port, "mem", "c", 20)) == Counter(bodies("chan", 20))
    assert multiset(await drain(server.tcp_port, "lonely", "c", 20)) == Counter(bodies("topic", 20))
    assert server.stop() == 0


@pytest.mark.parametrize("mem_queue_size", [0, 5])
async def test_disk_backlog_survives_restart(tmp_path, mem_queue_size):
    flag = f"--mem-queue-size={mem_queue_size}"
    server = Server(tmp_path, flag)
    await create_channel(server.tcp_port, "disk", "c")
    await publish(server.tcp_port, "disk", bodies("d", 30))
    assert queue_files(tmp_path, "disk:c") == ["disk:c.diskqueue.000000.dat"]  # spilled while running

    server = restart(server, flag)
    assert multiset(await drain(server.tcp_port, "disk", "c", 30)) == Counter(bodies("d", 30))
    assert server.stop() == 0


MEMORY_OR_DISK = pytest.mark.parametrize("flags", [(), ("--mem-queue-size=0",)], ids=["memory", "disk"])


@MEMORY_OR_DISK
async def test_in_flight_messages_survive_restart(tmp_path, flags):
    server = Server(tmp_path, *flags)
    consumer = await subscribe(server.tcp_port, "inflight", "c", rdy=10)
    await publish(server.tcp_port, "inflight", bodies("f", 15))
    held = await receive(consumer, 10)  # never FINished

    server = restart(server, *flags)
    await consumer.assert_closed()
    again = await drain(server.tcp_port, "inflight", "c", 15)
    assert multiset(again) == Counter(bodies("f", 15))
    held_ids = {msg.id for msg in held}
    assert {msg.id: msg.attempts for msg in again} == {msg.id: 2 if msg.id in held_ids else 1 for msg in again}
    assert server.stop() == 0


@MEMORY_OR_DISK
async def test_deferred_messages_survive_restart(tmp_path, flags):
    """DPUB'd and REQ'd-with-delay messages are written to disk at exit. As in NSQ, the
    disk format has no room for the delay: after a restart they are delivered at once
    (nsqio/nsq#1107)."""
    server = Server(tmp_path, *flags)
    consumer = await subscribe(server.tcp_port, "later", "c", rdy=5)
    publisher = await RawClient.connect(server.tcp_port)
    await publisher.send(b"".join(dpub("later", 60_000, body) for body in bodies("dpub", 5)))
    await publisher.send(b"".join(dpub("nochannel", 60_000, body) for body in bodies("held", 3)))
    for _ in range(8):
        assert await publisher.read_response() == b"OK"
    await publish(server.tcp_port, "later", bodies("req", 5))
    for msg in await receive(consumer, 5):
        await consumer.send(b"REQ %s 60000\n" % msg.id)
    await consumer.assert_no_frame(0.3)  # all ten are deferred now

    server = restart(server, *flags)
    await consumer.assert_closed()
    await publisher.assert_closed()
    again = await drain(server.tcp_port, "later", "c", 10)
    assert multiset(again) == Counter(bodies("dpub", 5) + bodies("req", 5))
    assert multiset(await drain(server.tcp_port, "nochannel", "c", 3)) == Counter(bodies("held", 3))
    assert server.stop() == 0


# -- several data files ------------------------------------------------------------------------

async def test_spill_and_read_back_across_data_files(tmp_path):
    # a record is 4 + 26 + 8 = 38 bytes: five fill a 200-byte file, the sixth starts the next
    flags = ("--mem-queue-size=0", "--max-bytes-per-file=200")
    server = Server(tmp_path, *flags)
    await create_channel(server.tcp_port, "spill", "c")
    published = [b"spill-%02d" % i for i in range(23)]
    await publish(server.tcp_port, "spill", published)
    await publish(server.tcp_port, "solo", [b"solo-%03d" % i for i in range(7)])  # no channel yet
    names = [f"spill:c.diskqueue.{n:06d}.dat" for n in range(5)]
    assert queue_files(tmp_path, "spill:c") == names
    assert [os.path.getsize(tmp_path / name) for name in names] == [190] * 4 + [114]
    assert queue_files(tmp_path, "spill") == []  # a topic with a channel hands messages straight on
    assert queue_files(tmp_path, "solo") == ["solo.diskqueue.000000.dat", "solo.diskqueue.000001.dat"]

    server = restart(server, *flags)
    consumer = await subscribe(server.tcp_port, "spill", "c", rdy=12)
    first = await receive(consumer, 12)
    await consumer.assert_no_frame(0.1)
    assert queue_files(tmp_path, "spill:c") == names[2:]  # files 0 and 1 fully read: deleted
    await consumer.send(b"".join(b"FIN " + msg.id + b"\n" for msg in first))
    rest = await receive(consumer, 11)
    await consumer.send(b"".join(b"FIN " + msg.id + b"\n" for msg in rest))
    await consumer.assert_no_frame(0.2)
    assert multiset(first + rest) == Counter(published)
    assert queue_files(tmp_path, "spill:c") == names[4:]  # the write file stays, read to its end

    assert multiset(await drain(server.tcp_port, "solo", "c", 7)) == Counter(b"solo-%03d" % i for i in range(7))
    assert "solo.diskqueue.000000.dat" not in queue_files(tmp_path, "solo")
    assert server.stop() == 0
    assert parse_meta(meta_file(tmp_path, "spill:c")) == (0, (4, 114), (4, 114))


# -- go-diskqueue compatibility ----------------------------------------------------------------

def write(path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def hex_id(n: int) -> bytes:
    return b"%016x" % (0x0A1B2C3D4E5F0000 + n)


async def test_reads_a_data_directory_written_in_go_diskqueue_format(tmp_path):
    write(tmp_path / "nsqd.dat", b'{"topics":[{"name":"orders","paused":false,"channels":[{"name":"billing",'
                                 b'"paused":false}]},{"name":"audit","paused":false,"channels":null}],'
                                 b'"version":"1.3.0"}')
    p = [payload(b"order %d" % n, hex_id(n), timestamp=1_700_000_000_000_000_000 + n, attempts=n % 3)
         for n in range(8)]
    # channel queue: p0 already read (readPos after it); p1, p2 in file 0, p3, p4 in file 1
    write(data_file(tmp_path, "orders:billing", 0), record(p[0]) + record(p[1]) + record(p[2]))
    write(data_file(tmp_path, "orders:billing", 1), record(p[3]) + record(p[4]))
    write(meta_file(tmp_path, "orders:billing"),
          meta_text(4, (0, len(record(p[0]))), (1, len(record(p[3]) + record(p[4])))).encode())
    # topic backlog, numbered from 3 as after earlier files were consumed
    write(data_file(tmp_path, "orders", 3), record(p[5]) + record(p[6]))
    write(meta_file(tmp_path, "orders"), meta_text(2, (3, 0), (3, len(record(p[5]) + record(p[6])))).encode())
    write(data_file(tmp_path, "audit", 0), record(p[7]))
    write(meta_file(tmp_path, "audit"), meta_text(1, (0, 0), (0, len(record(p[7])))).encode())

    server = Server(tmp_path)
    got = await drain(server.tcp_port, "orders", "billing", 6)
    expected = {hex_id(n): (1_700_000_000_000_000_000 + n, n % 3 + 1, b"order %d" % n) for n in range(1, 7)}
    assert {msg.id: (msg.timestamp, msg.attempts, msg.body) for msg in got} == expected
    [audit] = await drain(server.tcp_port, "audit", "x", 1)
    assert (audit.id, audit.body, audit.attempts) == (hex_id(7), b"order 7", 2)
    assert server.stop() == 0


async def test_attempts_carry_into_their_high_byte_and_wrap_as_a_uint16(tmp_path):
    """A delivery raises the stored attempts by one, as Go's uint16 msg.Attempts++ does."""
    stored = (0, 254, 255, 511, 65535)
    p = [payload(b"m%d" % n, hex_id(n), attempts=attempts) for n, attempts in enumerate(stored)]
    write(data_file(tmp_path, "t:c", 0), b"".join(map(record, p)))
    write(meta_file(tmp_path, "t:c"), meta_text(len(p), (0, 0), (0, sum(len(record(x)) for x in p))).encode())
    server = Server(tmp_path)
    client = await subscribe(server.tcp_port, "t", "c", rdy=len(p))
    got = await receive(client, len(p))
    assert [(msg.id, msg.attempts, msg.body) for msg in got] == [
        (hex_id(0), 1, b"m0"), (hex_id(1), 255, b"m1"), (hex_id(2), 256, b"m2"), (hex_id(3), 512, b"m3"),
        (hex_id(4), 0, b"m4")]
    await client.send(b"REQ " + hex_id(2) + b" 0\n")
    again = await client.read_message()
    assert (again.id, again.attempts, again.timestamp, again.body) == (hex_id(2), 257, got[2].timestamp, b"m2")
    await client.close()
    assert server.stop() == 0


async def test_files_left_after_a_stop_are_in_go_diskqueue_format(tmp_path):
    max_bytes = 300
    server = Server(tmp_path, f"--max-bytes-per-file={max_bytes}")
    started = time.time_ns()
    await create_channel(server.tcp_port, "orders", "billing")
    published = [b"x" * (10 + 7 * i) for i in range(12)]
    await publish(server.tcp_port, "orders", published)
    await publish(server.tcp_port, "lonely", bodies("l", 3))
    assert server.stop() == 0

    for queue, expected in (("orders:billing", published), ("lonely", bodies("l", 3))):
        messages = queued_messages(tmp_path, queue)
        assert multiset(messages) == Counter(expected)
        assert len({msg.id for msg in messages}) == len(messages)
        for msg in messages:
            check_message(msg, started)
            assert msg.attempts == 0
    names = queue_files(tmp_path, "orders:billing")
    assert len(names) > 2
    for name, next_name in zip(names, names[1:]):  # go-diskqueue's roll rule, file by file
        size = os.path.getsize(tmp_path / name)
        with open(tmp_path / next_name, "rb") as handle:
            (next_length,) = struct.unpack(">i", handle.read(4))
        assert size <= max_bytes < size + 4 + next_length
    for path in tmp_path.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
        assert not path.name.endswith(".tmp")


# -- corruption --------------------------------------------------------------------------------

async def test_corrupt_data_files_are_renamed_bad_and_skipped(tmp_path):
    write(tmp_path / "nsqd.dat", b'{"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":false}]},'
                                 b'{"name":"w","paused":false,"channels":[{"name":"c","paused":false}]}],'
                                 b'"version":"1.3.0"}')
    p = [payload(b"good %d" % n, hex_id(n)) for n in range(8)]
    files = [
        record(p[0]) + struct.pack(">i", 5) + b"short",              # length below a message's minimum
        record(p[1]) + record(p[2]),
        record(p[3]) + struct.pack(">i", 0x7FFFFFFF) + b"x" * 40,     # length beyond --max-msg-size
        record(p[4]) + struct.pack(">i", 100) + b"y" * 30,           # truncated record
        record(p[5]) + record(p[6]),
    ]
    for number, data in enumerate(files):
        write(data_file(tmp_path, "t:c", number), data)
    write(meta_file(tmp_path, "t:c"), meta_text(10, (0, 0), (4, len(files[4]))).encode())
    # the corrupt file is also the file being written
    tail = record(p[7]) + struct.pack(">i", -1)
    write(data_file(tmp_path, "w:c", 0), tail)
    write(meta_file(tmp_path, "w:c"), meta_text(2, (0, 0), (0, len(tail))).encode())

    server = Server(tmp_path)
    got = await drain(server.tcp_port, "t", "c", 7)
    assert {msg.id for msg in got} == {hex_id(n) for n in range(7)}
    bad = sorted(name for name in os.listdir(tmp_path) if name.endswith(".bad"))
    assert bad == [f"t:c.diskqueue.{n:06d}.dat.bad" for n in (0, 2, 3)]
    assert [msg.id for msg in await drain(server.tcp_port, "w", "c", 1)] == [hex_id(7)]
    assert os.path.exists(data_file(tmp_path, "w:c", 0) + ".bad")

    # still serving: new messages go to new files and come back
    await publish(server.tcp_port, "t", bodies("new", 3))
    await publish(server.tcp_port, "w", bodies("new", 3))
    assert multiset(await drain(server.tcp_port, "t", "c", 3)) == Counter(bodies("new", 3))
    assert multiset(await drain(server.tcp_port, "w", "c", 3)) == Counter(bodies("new", 3))
    assert server.stop() == 0


# -- unclean stops -----------------------------------------------------------------------------

async def test_acknowledged_messages_survive_sigkill_with_sync_every_1(tmp_path):
    """What an unclean stop keeps.

    With --mem-queue-size=0 every message is written to the disk queue (write(2), so the
    kernel has it) before its OK. A killed process therefore loses no acknowledged
    message, whatever --sync-every says: on restart, a write file longer than the
    metadata says (or one without metadata) is read to its end, and writing resumes in a
    new file. --sync-every=1 adds an fsync of the data and a metadata write after every
    write and every read, and holds a publish's OK until an fsync that began after its
    write has completed (group commit, tests/test_nsqd_faults.py): an OS crash or power
    loss loses no acknowledged message that was on disk, and messages FINished before
    the metadata caught up are not delivered again.

    With the default --sync-every (2500) and --sync-timeout (2s): what a killed process
    wrote to disk survives as above, but after an OS crash or power loss up to 2500
    operations or 2 s of writes per queue can be lost, and after any unclean stop the
    messages read since the last sync are delivered again (at least once).

    Never kept by an unclean stop, with any --sync-every: messages in memory (up to
    --mem-queue-size per topic and per channel; the default of 10000 puts every message
    there first), in flight, or deferred. Those reach the disk only on a graceful stop.
    """
    flags = ("--mem-queue-size=0", "--sync-every=1")
    server = Server(tmp_path, *flags)
    await create_channel(server.tcp_port, "kill", "c")
    await publish(server.tcp_port, "kill", bodies("k", 20))
    consumer = await subscribe(server.tcp_port, "kill", "c", rdy=5)
    done = await receive(consumer, 5)
    await consumer.send(b"RDY 0\n" + b"".join(b"FIN " + msg.id + b"\n" for msg in done))
    await consumer.assert_no_frame(0.1)
    await consumer.close()
    meta = meta_file(tmp_path, "kill:c")
    await wait_until(lambda: os.path.exists(meta) and parse_meta(meta)[0] == 15, what="the reads synced")
    server.kill()

    server = Server(tmp_path, *flags)
    again = await drain(server.tcp_port, "kill", "c", 15)
    assert multiset(again) == Counter(bodies("k", 20)) - multiset(done)
    assert server.stop() == 0


async def test_sigkill_before_any_sync_keeps_what_is_on_disk(tmp_path):
    """Default --sync-every, and a --sync-timeout that never fires: the channel's metadata
    was never written, but its data file was. The restart reads that file to its end and
    writes new messages to a new file (go-diskqueue's unclean-stop rule)."""
    flags = ("--mem-queue-size=0", "--sync-timeout=1h")
    server = Server(tmp_path, *flags)
    await create_channel(server.tcp_port, "crash", "c")
    await wait_until(lambda: b'"c"' in (tmp_path / "nsqd.dat").read_bytes(), what="nsqd.dat with the channel")
    await publish(server.tcp_port, "crash", bodies("before", 10))
    assert not os.path.exists(meta_file(tmp_path, "crash:c"))
    server.kill()

    server = Server(tmp_path, *flags)
    await publish(server.tcp_port, "crash", bodies("after", 5))
    assert queue_files(tmp_path, "crash:c") == ["crash:c.diskqueue.000000.dat", "crash:c.diskqueue.000001.dat"]
    assert multiset(await drain(server.tcp_port, "crash", "c", 15)) == Counter(bodies("before", 10) + bodies("after", 5))
    assert server.stop() == 0


async def test_metadata_older_than_the_data_files_loses_nothing(tmp_path):
    """As after a crash whose last synced metadata predates later writes and a roll: the
    records past the metadata's writePos are read to their files' ends, and new messages
    go to a new file instead of over them."""
    write(tmp_path / "nsqd.dat", b'{"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":false}]}],'
                                 b'"version":"1.3.0"}')
    p = [payload(b"old %d" % n, hex_id(n)) for n in range(3)]
    write(data_file(tmp_path, "t:c", 0), record(p[0]) + record(p[1]))
    write(data_file(tmp_path, "t:c", 1), record(p[2]))
    write(meta_file(tmp_path, "t:c"), meta_text(1, (0, 0), (0, len(record(p[0])))).encode())

    server = Server(tmp_path, "--mem-queue-size=0")
    await publish(server.tcp_port, "t", bodies("new", 2))
    assert queue_files(tmp_path, "t:c")[-1] == "t:c.diskqueue.000002.dat"
    got = await drain(server.tcp_port, "t", "c", 5)
    assert multiset(got) == Counter([b"old 0", b"old 1", b"old 2"] + bodies("new", 2))
    assert server.stop() == 0


async def test_a_topic_hands_on_records_its_metadata_does_not_count(tmp_path):
    """A topic's disk queue whose metadata is behind its data file (or missing, as here: killed
    before its first sync) has a depth short of its records; the topic still hands every record
    to its channels (it asks the queue for records, not for its depth)."""
    write(tmp_path / "nsqd.dat", b'{"topics":[{"name":"t","paused":false,"channels":null}],"version":"1.3.0"}')
    write(data_file(tmp_path, "t", 0), b"".join(record(payload(b"early %d" % n, hex_id(n))) for n in range(4)))
    server = Server(tmp_path)
    got = await drain(server.tcp_port, "t", "c", 4)
    assert multiset(got) == Counter(b"early %d" % n for n in range(4))
    assert server.stop() == 0


# -- ephemeral topics and channels -------------------------------------------------------------

async def test_ephemeral_topics_and_channels_stay_off_disk(tmp_path):
    async with trio.open_nursery() as nursery:
        nsqd = NSQD(default_options(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", data_path=str(tmp_path),
                                    mem_queue_size=3))
        await nursery.start(nsqd.run)
        port = nsqd.tcp_port
        both = await subscribe(port, "e#ephemeral", "c#ephemeral")
        channel_only = await subscribe(port, "durable", "c#ephemeral")
        await publish(port, "e#ephemeral", bodies("e", 10))
        await publish(port, "durable", bodies("d", 10))
        await publish(port, "lone#ephemeral", bodies("lone", 10))  # an ephemeral topic, no channel

        # beyond --mem-queue-size, ephemeral overflow is dropped
        await both.send(b"RDY 10\n")
        assert len(await receive(both, 3)) == 3
        await both.assert_no_frame(0.2)
        await channel_only.send(b"RDY 10\n")
        assert len(await receive(channel_only, 3)) == 3
        await channel_only.assert_no_frame(0.1)
        assert len(await drain(port, "lone#ephemeral", "c", 3)) == 3
        nsqd.stop()
    # lone#ephemeral's durable channel c has a disk queue (as in NSQ), empty: the stop wrote its metadata
    assert sorted(os.listdir(tmp_path)) == ["durable.diskqueue.meta.dat", "lone#ephemeral:c.diskqueue.meta.dat",
                                            "nsqd.dat"]
    assert (tmp_path / "nsqd.dat").read_bytes() == b'{"topics":[{"name":"durable","paused":false,"channels":null}],' \
                                                   b'"version":"1.3.0"}'


async def test_ephemeral_channel_and_topic_go_with_their_last_user(start_nsqd, tmp_path):
    nsqd = await start_nsqd(data_path=str(tmp_path))
    port = nsqd.tcp_port
    first = await subscribe(port, "durable", "e#ephemeral")
    second = await subscribe(port, "durable", "e#ephemeral")
    await first.close()
    channel = nsqd.topics["durable"].channels["e#ephemeral"]
    await wait_until(lambda: len(channel.clients) == 1, what="the first consumer gone")
    assert "e#ephemeral" in nsqd.topics["durable"].channels  # one consumer left
    await second.close()
    await wait_until(lambda: "e#ephemeral" not in nsqd.topics["durable"].channels, what="channel deleted")
    assert "durable" in nsqd.topics

    consumer = await subscribe(port, "t#ephemeral", "c#ephemeral")
    await consumer.close()
    await wait_until(lambda: "t#ephemeral" not in nsqd.topics, what="ephemeral topic deleted")

    # an ephemeral topic also goes when its last (durable) channel is deleted
    await create_channel(port, "u#ephemeral", "a")
    await create_channel(port, "u#ephemeral", "b")
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{nsqd.http_port}") as http:
        assert (await http.post("/channel/delete", params={"topic": "u#ephemeral", "channel": "a"})).status_code == 200
        assert "u#ephemeral" in nsqd.topics
        assert (await http.post("/channel/delete", params={"topic": "u#ephemeral", "channel": "b"})).status_code == 200
    assert "u#ephemeral" not in nsqd.topics
    assert [name for name in os.listdir(tmp_path) if "ephemeral" in name] == []


# -- empty and delete --------------------------------------------------------------------------

async def test_empty_and_delete_remove_disk_files(tmp_path):
    server = Server(tmp_path, "--mem-queue-size=0", "--max-bytes-per-file=200")
    await create_channel(server.tcp_port, "gone", "a")
    holder = await subscribe(server.tcp_port, "gone", "b", rdy=2)  # holds two in flight when b goes
    await publish(server.tcp_port, "gone", bodies("gone", 14))
    assert len(await receive(holder, 2)) == 2
    await publish(server.tcp_port, "held", bodies("held", 12))
    for queue in ("gone:a", "gone:b", "held"):
        assert len(queue_files(tmp_path, queue)) == 3
    await wait_until(lambda: os.path.exists(meta_file(tmp_path, "gone:a")), what="a synced meta file")

    def post(path: str, **params) -> None:
        answer = httpx.post(server.http + path, params=params)
        assert answer.status_code == 200, answer.text

    post("/channel/empty", topic="gone", channel="a")
    assert queue_files(tmp_path, "gone:a") == []
    assert not os.path.exists(meta_file(tmp_path, "gone:a"))
    await publish(server.tcp_port, "gone", bodies("again", 2))
    assert multiset(await drain(server.tcp_port, "gone", "a", 2)) == Counter(bodies("again", 2))

    post("/channel/delete", topic="gone", channel="b")
    await holder.assert_closed()
    await wait_until(lambda: not [name for name in os.listdir(tmp_path) if name.startswith("gone:b.")],
                     what="the deleted channel's files removed")

    post("/topic/empty", topic="held")
    assert queue_files(tmp_path, "held") == []
    await publish(server.tcp_port, "held", bodies("kept", 2))

    holder = await subscribe(server.tcp_port, "gone", "a", rdy=1)
    await publish(server.tcp_port, "gone", [b"in flight"])
    assert (await holder.read_message()).body == b"in flight"
    post("/topic/delete", topic="gone")
    await holder.assert_closed()
    await wait_until(lambda: not [name for name in os.listdir(tmp_path) if name.startswith("gone")],
                     what="the deleted topic's files removed")

    assert server.stop() == 0
    assert [name for name in os.listdir(tmp_path) if name.startswith("gone")] == []
    server = Server(tmp_path)
    assert multiset(await drain(server.tcp_port, "held", "c", 2)) == Counter(bodies("kept", 2))
    assert server.stop() == 0
