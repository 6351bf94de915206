"""--persist-deferred against real nsqd processes: deferred messages keep their due time across a
graceful stop, and with --mem-queue-size=0 across a kill -9, with messages in flight; the files
sit beside go-diskqueue's in the documented format, NSQ v1.3 still reads the directory, and a
start without the flag hands the messages back to the disk queues NSQ's way.

The side files are parsed here independently of nsqd/held_file.py, from the documented format:
MAGIC, then ``[kind:1][value:int64][size:int32][data]`` records."""

import os
import signal
import struct
import time
from collections import Counter

import httpx
import trio

from common.message import decode_message

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import (Server, bodies, data_file, dpub, drain, go_metadata, meta_file, meta_text, multiset, nsqd_dat,
                      payload, publish, queue_files, queued_messages, receive, record, restart, subscribe, wait_until)
from .helpers import RawClient

MAGIC = b"NSQPYHD1"
RECORD = struct.Struct(">cqi")
WRITE_THROUGH = ("--persist-deferred", "--mem-queue-size=0", "--sync-timeout=200ms")


def side_records(path) -> list[tuple[bytes, int, bytes]]:
    """(kind, value, data) of every record of a side file, checked against the documented format."""
    data = path.read_bytes()
    if not data:
        return []  # being created
    assert data[:8] == MAGIC, data[:16]
    records, pos = [], 8
    while pos < len(data):
        kind, value, size = RECORD.unpack_from(data, pos)
        chunk = data[pos + RECORD.size:pos + RECORD.size + size]
        assert len(chunk) == size and kind in (b"D", b"H", b"F", b"X", b"P")
        records.append((kind, value, chunk))
        pos += RECORD.size + size
    return records


def in_flight_records(path) -> list[tuple[bytes, int, bytes]]:
    return [entry for entry in side_records(path) if entry[0] == b"F"]


def side_files(data_path) -> list[str]:
    return sorted(name for name in os.listdir(data_path) if name.endswith((".deferred.dat", ".inflight.dat")))


async def consume_at(port: int, topic: str, channel: str, count: int, timeout: float = 10) -> list[tuple[float, object]]:
    """(wall-clock time of arrival, message) of ``count`` messages, each FINished."""
    client = await subscribe(port, topic, channel, rdy=count)
    arrived = []
    for _ in range(count):
        [message] = await receive(client, 1, timeout)
        arrived.append((time.time(), message))
        await client.send(b"FIN " + message.id + b"\n")
    await client.close()
    return arrived


async def test_deferred_messages_keep_their_due_time_across_a_graceful_stop(tmp_path):
    server = Server(tmp_path, "--persist-deferred")
    consumer = await subscribe(server.tcp_port, "later", "c", rdy=5)
    publisher = await RawClient.connect(server.tcp_port)
    published_at = time.time()
    await publisher.send(dpub("later", 3000, b"in three seconds") + dpub("later", 1200, b"due during the restart"))
    assert [await publisher.read_response() for _ in range(2)] == [b"OK", b"OK"]
    answered_at = time.time()
    await publish(server.tcp_port, "later", [b"requeued for 2.5s"])
    [msg] = await receive(consumer, 1)
    await consumer.send(b"REQ " + msg.id + b" 2500\n")
    await consumer.assert_no_frame(0.3)
    assert server.signal(signal.SIGTERM) == 0

    assert queued_messages(tmp_path, "later:c") == []  # not in the disk queue: in a file of their own
    assert side_files(tmp_path) == ["later:c.deferred.dat"]
    stored = side_records(tmp_path / "later:c.deferred.dat")
    assert [(kind, decode_message(data).body) for kind, _, data in stored] == [
        (b"D", b"due during the restart"), (b"D", b"requeued for 2.5s"), (b"D", b"in three seconds")]
    assert decode_message(stored[1][2]).attempts == 1
    assert published_at + 3 - 0.05 <= stored[2][1] / 1e9 <= answered_at + 3 + 0.05  # due 3 s after nsqd took it
    time.sleep(max(0.0, published_at + 1.3 - time.time()))  # deliberate: one deferral falls due while stopped

    server = Server(tmp_path, "--persist-deferred")
    arrived = await consume_at(server.tcp_port, "later", "c", 3)
    due = {b"due during the restart": published_at + 1.2, b"requeued for 2.5s": published_at + 2.5,
           b"in three seconds": published_at + 3}
    for at, message in arrived:
        assert at >= due[message.body] - 0.05, (message.body, at - due[message.body])
        assert at <= max(due[message.body], time.time()) + 1.5
    assert arrived[0][1].body == b"due during the restart"  # overdue: at once
    assert server.stop() == 0
    assert side_files(tmp_path) == []  # nothing deferred at the second stop


async def test_a_topic_holds_deferred_messages_with_their_delay_until_its_first_channel(tmp_path):
    server = Server(tmp_path, "--persist-deferred")
    publisher = await RawClient.connect(server.tcp_port)
    await publisher.send(dpub("orphan", 1500, b"held"))
    assert await publisher.read_response() == b"OK"
    server = restart(server, "--persist-deferred")
    assert [(kind, value) for kind, value, _ in side_records(tmp_path / "orphan.deferred.dat")] == [(b"H", 1_500_000_000)]
    subscribed_at = time.time()
    [(at, message)] = await consume_at(server.tcp_port, "orphan", "c", 1)
    assert message.body == b"held" and at - subscribed_at >= 1.45  # the delay starts at the channel
    assert server.stop() == 0


async def test_without_the_flag_the_files_are_read_then_handed_to_the_disk_queues(tmp_path):
    server = Server(tmp_path, "--persist-deferred")
    await subscribe(server.tcp_port, "t", "c")
    publisher = await RawClient.connect(server.tcp_port)
    await publisher.send(dpub("t", 60_000, b"an hour later"))
    assert await publisher.read_response() == b"OK"
    server = restart(server)  # without the flag: read back, still deferred
    assert httpx.get(f"{server.http}/stats", params={"format": "json"}).json()["topics"][0]["channels"][0][
        "deferred_count"] == 1
    assert server.stop() == 0
    assert side_files(tmp_path) == []  # as NSQ v1.3 leaves a data directory
    [message] = queued_messages(tmp_path, "t:c")
    assert message.body == b"an hour later"


async def test_a_directory_with_the_flag_on_is_still_nsqs_and_nsqs_is_read(tmp_path):
    server = Server(tmp_path, *WRITE_THROUGH)
    await publish(server.tcp_port, "lonely", [b"queued"])  # a topic without channels: its own disk queue
    await subscribe(server.tcp_port, "orders", "billing")
    await publish(server.tcp_port, "orders", bodies("o", 3))
    publisher = await RawClient.connect(server.tcp_port)
    await publisher.send(dpub("orders", 60_000, b"deferred"))
    assert await publisher.read_response() == b"OK"
    assert server.stop() == 0
    assert go_metadata(nsqd_dat(tmp_path)) == [("lonely", False, []), ("orders", False, [("billing", False)])]
    assert multiset(queued_messages(tmp_path, "orders:billing")) == Counter(bodies("o", 3))
    assert multiset(queued_messages(tmp_path, "lonely")) == Counter([b"queued"])
    assert side_files(tmp_path) == ["orders:billing.deferred.dat"]
    others = [name for name in os.listdir(tmp_path) if ".diskqueue." not in name and name not in
              ("nsqd.dat", "orders:billing.deferred.dat")]
    assert others == []  # besides go-diskqueue's files and nsqd.dat, only the documented one

    # and a directory NSQ v1.3 wrote is read with the flag on
    nsq_dir = tmp_path / "nsq"
    nsq_dir.mkdir()
    (nsq_dir / "nsqd.dat").write_bytes(b'{"topics":[{"name":"t","paused":false,"channels":[{"name":"c",'
                                       b'"paused":false}]}],"version":"1.3.0"}')
    messages = [payload(b"from nsq %d" % n, b"%016x" % n, attempts=2) for n in range(3)]
    (nsq_dir / os.path.basename(data_file(nsq_dir, "t:c", 0))).write_bytes(b"".join(map(record, messages)))
    (nsq_dir / os.path.basename(meta_file(nsq_dir, "t:c"))).write_text(
        meta_text(3, (0, 0), (0, sum(len(record(m)) for m in messages))))
    server = Server(nsq_dir, *WRITE_THROUGH)
    got = await drain(server.tcp_port, "t", "c", 3)
    assert sorted((m.body, m.attempts) for m in got) == [(b"from nsq %d" % n, 3) for n in range(3)]
    assert server.stop() == 0


# -- --mem-queue-size=0: written through, so a kill -9 loses nothing acknowledged --------------------

async def test_kill_9_keeps_deferred_in_flight_and_straight_delivered_messages(tmp_path):
    server = Server(tmp_path, *WRITE_THROUGH)
    holder = await subscribe(server.tcp_port, "jobs", "workers", rdy=10)
    await publish(server.tcp_port, "jobs", bodies("straight", 3))  # handed to the ready consumer
    held = await receive(holder, 3)
    await holder.send(b"REQ " + held[0].id + b" 2000\n")  # one deferred again, two in flight
    publisher = await RawClient.connect(server.tcp_port)
    deferred_at = time.time()
    await publisher.send(dpub("jobs", 2500, b"dpub") + dpub("empty_topic", 1000, b"held"))
    assert [await publisher.read_response() for _ in range(2)] == [b"OK", b"OK"]
    await wait_until(lambda: sorted(side_files(tmp_path)) == ["empty_topic.deferred.dat", "jobs:workers.deferred.dat",
                                                              "jobs:workers.inflight.dat"], what="the side files")
    server.kill()

    server = Server(tmp_path, *WRITE_THROUGH)
    arrived = await consume_at(server.tcp_port, "jobs", "workers", 4)
    by_body = {message.body: (at, message) for at, message in arrived}
    assert set(by_body) == {b"straight-0", b"straight-1", b"straight-2", b"dpub"}
    assert by_body[b"straight-1"][1].attempts == 2 and by_body[b"straight-2"][1].attempts == 2
    assert by_body[b"straight-0"][0] >= deferred_at + 2.0 - 0.3 and by_body[b"straight-0"][1].attempts == 2
    assert by_body[b"dpub"][0] >= deferred_at + 2.5 - 0.05
    [(_, held_message)] = await consume_at(server.tcp_port, "empty_topic", "c", 1)
    assert held_message.body == b"held"
    assert server.stop() == 0


async def test_kill_9_under_load_loses_no_acknowledged_message(tmp_path):
    """Publishers (PUB, and DPUB of up to a second) and a consumer that holds half of what it
    gets and FINishes the rest, while nsqd is killed: after a restart every acknowledged message
    was finished before the kill or arrives after it."""
    server = Server(tmp_path, *WRITE_THROUGH)
    acknowledged, finished = set(), set()

    async def publisher(prefix: bytes, deferred: bool) -> None:
        client = await RawClient.connect(server.tcp_port)
        n = 0
        try:
            while True:
                body = b"%s-%d" % (prefix, n)
                n += 1
                await client.send(dpub("load", 10 + n % 1000, body) if deferred else
                                  b"PUB load\n" + struct.pack(">i", len(body)) + body)
                if await client.read_response() == b"OK":
                    acknowledged.add(body)
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return

    async def consumer() -> None:
        client = await subscribe(server.tcp_port, "load", "c", rdy=100)
        try:
            while True:
                [message] = await receive(client, 1)
                if hash(message.body) % 2:
                    finished.add(message.body)
                    await client.send(b"FIN " + message.id + b"\n")
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError):
            return

    await subscribe(server.tcp_port, "load", "c")  # the channel exists before the first message
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consumer)
        nursery.start_soon(publisher, b"pub", False)
        nursery.start_soon(publisher, b"dpub", True)
        await wait_until(lambda: len(acknowledged) > 600, timeout=20, what="load")
        server.kill()
    server = Server(tmp_path, *WRITE_THROUGH)
    after: set[bytes] = set()
    client = await subscribe(server.tcp_port, "load", "c", rdy=500)
    while not acknowledged <= finished | after:
        try:
            [message] = await receive(client, 1, timeout=3)  # deferrals were a second at most
        except trio.TooSlowError:
            break
        after.add(message.body)
        await client.send(b"FIN " + message.id + b"\n")
    missing = acknowledged - finished - after
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    assert server.stop() == 0


async def test_finished_messages_leave_the_in_flight_file_and_empty_clears_the_files(tmp_path):
    server = Server(tmp_path, *WRITE_THROUGH)
    client = await subscribe(server.tcp_port, "t", "c", rdy=10)
    await publish(server.tcp_port, "t", bodies("m", 4))
    received = await receive(client, 4)
    inflight = tmp_path / "t:c.inflight.dat"
    await wait_until(lambda: inflight.exists() and len(in_flight_records(inflight)) == 4, what="4 in flight")
    await client.send(b"".join(b"FIN " + m.id + b"\n" for m in received[:3]))
    await wait_until(lambda: [decode_message(d).body for _, _, d in in_flight_records(inflight)] == [b"m-3"],
                     what="the in-flight file rewritten")
    await client.send(b"REQ " + received[3].id + b" 60000\n")
    deferred = tmp_path / "t:c.deferred.dat"
    await wait_until(lambda: deferred.exists() and [k for k, _, _ in side_records(deferred)] == [b"D"], what="deferred")
    assert httpx.post(f"{server.http}/channel/empty", params={"topic": "t", "channel": "c"}).status_code == 200
    assert side_files(tmp_path) == []
    assert server.stop() == 0
    assert queue_files(tmp_path, "t:c") in ([], ["t:c.diskqueue.000001.dat"])


async def test_a_deleted_channels_files_go_with_it_and_the_channel_made_again_has_none_of_them(tmp_path):
    """They are moved away with its disk queue's files by a worker thread (nsqd/file_remover.py):
    a channel of the same name made right after must not read them back."""
    server = Server(tmp_path, *WRITE_THROUGH)
    client = await subscribe(server.tcp_port, "t", "c", rdy=10)
    await publish(server.tcp_port, "t", bodies("old", 2))
    received = await receive(client, 2)
    await client.send(b"REQ " + received[0].id + b" 60000\n")
    await wait_until(lambda: side_files(tmp_path) == ["t:c.deferred.dat", "t:c.inflight.dat"] and
                     [k for k, _, _ in side_records(tmp_path / "t:c.deferred.dat")] == [b"D"], what="both files")
    assert httpx.post(f"{server.http}/channel/delete", params={"topic": "t", "channel": "c"}).status_code == 200
    assert side_files(tmp_path) == []
    consumer = await subscribe(server.tcp_port, "t", "c", rdy=10)
    await publish(server.tcp_port, "t", [b"new"])
    assert [message.body for message in await receive(consumer, 1)] == [b"new"]
    [channel] = httpx.get(f"{server.http}/stats", params={"format": "json", "topic": "t"}).json()["topics"][0]["channels"]
    assert (channel["depth"], channel["deferred_count"], channel["in_flight_count"]) == (0, 0, 1)
    assert server.stop() == 0


# -- the side files' reader ------------------------------------------------------------------------------

def message_record(kind: bytes, value: int, body: bytes, n: int = 1) -> bytes:
    data = payload(body, b"%016x" % n)
    return RECORD.pack(kind, value, len(data)) + data


def test_a_record_cut_short_or_malformed_ends_the_file_and_the_last_record_of_an_id_wins(tmp_path, caplog):
    from nsqd.held_file import HeldFile

    path = tmp_path / "t:c.deferred.dat"
    gone = RECORD.pack(b"X", 0, 16) + b"%016x" % 2
    whole = MAGIC + message_record(b"D", 5, b"one", 1) + message_record(b"D", 6, b"two", 2) + gone
    path.write_bytes(whole + message_record(b"F", 1, b"three", 3)[:-2])  # the last write cut by a crash
    assert [(kind, value, data[26:]) for kind, value, data in HeldFile(str(path)).read().messages.values()] == [
        (b"D", 5, b"one")]
    corrupt = bytearray(whole + message_record(b"D", 7, b"four", 4) + message_record(b"D", 8, b"five", 5))
    corrupt[len(whole) + RECORD.size + 12] = 0xFF  # "four"'s ID is no longer an ID
    path.write_bytes(bytes(corrupt))
    assert [data[26:] for _, _, data in HeldFile(str(path)).read().messages.values()] == [b"one"]
    assert "bad record" in caplog.text
    path.write_bytes(b"something else entirely")
    assert HeldFile(str(path)).read().messages == {}


async def test_a_graceful_stop_writes_and_removes_the_files_in_worker_threads_not_on_the_loop(tmp_path, monkeypatch):
    """20,000 channels' files written one after another held the event loop at a stop."""
    import threading

    from nsqd.held_file import HeldFile
    from nsqd.nsqd import NSQD
    from nsqd.options import default_options

    threads: list[tuple[str, int]] = []
    for name in ("replace", "remove"):
        original = getattr(HeldFile, name)

        def recorded(self, *args, original=original, name=name):
            threads.append((name, threading.get_ident()))
            return original(self, *args)
        monkeypatch.setattr(HeldFile, name, recorded)
    nsqd = NSQD(default_options(data_path=str(tmp_path), tcp_address="127.0.0.1:0", http_address="127.0.0.1:0",
                                persist_deferred=True))
    async with trio.open_nursery() as nursery:
        await nursery.start(nsqd.run)
        for number in range(3):
            await (await subscribe(nsqd.tcp_port, f"t{number}", "c")).close()
        publisher = await RawClient.connect(nsqd.tcp_port)
        await publisher.send(b"".join(dpub(f"t{number}", 60_000, b"later %d" % number) for number in range(3))
                             + dpub("no_channel", 60_000, b"held"))
        assert [await publisher.read_response() for _ in range(4)] == [b"OK"] * 4
        await publisher.close()
        threads.clear()  # the start's reads and removals are not the stop's
        nsqd.stop()
    loop_thread = threading.get_ident()
    assert {name for name, _ in threads} == {"replace", "remove"}
    assert all(thread != loop_thread for _, thread in threads), threads
    assert side_files(tmp_path) == ["no_channel.deferred.dat", "t0:c.deferred.dat", "t1:c.deferred.dat",
                                    "t2:c.deferred.dat"]
    assert [decode_message(data).body for _, _, data in side_records(tmp_path / "t1:c.deferred.dat")] == [b"later 1"]
    assert queued_messages(tmp_path, "t1:c") == []  # in its file, not the disk queue
