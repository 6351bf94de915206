"""NSQ v1.3.0's nsqd and ours on one data directory, both ways (issue 20).

Each test has one nsqd write a data directory and stop: gracefully (SIGTERM: everything held in
memory, in flight or deferred goes to the disk queues) or with kill -9. The directory is then
copied: the other nsqd starts on one copy, and the writer's own program on the other, as the
reference: what NSQ's nsqd does with the same bytes is what ours must do. Both must show the same
/stats (depths, pauses) and deliver the same messages (IDs, bodies, timestamps, attempts), and
those must be what NSQ's guarantees promise.
"""

import os
import shutil
import struct
from collections import Counter
from dataclasses import dataclass, field

import pytest
import trio

from nsqd.nsqd import NSQD
from nsqd.options import default_options

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import (
    DRAIN_CHANNEL, GoServer, RawClient, Server, bodies, bodies_and_attempts, create_channel, decode_message,
    differences, directory_summary, dpub, drain_everything, go_encoding, http_post, meta_file, meta_text,
    metadata_current, mpub, normalised_nsqd_dat, nsqd_dat, nsqd_dat_layout, parse_meta, payload, publish,
    queue_files, queues_view, receive, record, settled_view, subscribe, take_all, unlisted_records, wait_until,
)
from .go_nsq import requires_go

pytestmark = requires_go

LONG_MS = 1_800_000  # a deferral that outlasts any test (within --max-req-timeout's 1h)
NO_TIMEOUTS = ("--msg-timeout=10m",)  # nothing in flight times out during a test
FLAG_SETS = {
    "memory": (),  # NSQ's defaults: everything stays in memory until the stop
    "spill": ("--mem-queue-size=5", "--max-bytes-per-file=2048"),
    "disk": ("--mem-queue-size=0", "--max-bytes-per-file=1024"),
}
ORDER_BODIES = [b"order-%02d-" % i + b"x" * (37 * i) for i in range(39)] + [b"big-" + bytes(range(256)) * 800]
EPHEMERAL = ("tmp#ephemeral", "c")  # an ephemeral topic's durable channel: on disk, not in nsqd.dat


@dataclass
class Written:
    """What a writer put in its data directory, and what must come back."""

    after_stop: dict[tuple[str, str], Counter]  # (topic, channel) -> (body, attempts when delivered)
    after_kill: dict[tuple[str, str], Counter]  # the same after kill -9 with every queue on disk and synced
    layout: dict[str, tuple[bool, dict[str, bool]]]  # topic -> (paused, {channel: paused})
    ephemeral_kept: int  # messages EPHEMERAL holds (NSQ's ephemeral topic may drop some on the way)
    clients: list[RawClient] = field(default_factory=list)  # kept open until the stop

    def check(self, delivered: dict[tuple[str, str], Counter], expected: dict[tuple[str, str], Counter]) -> None:
        """``delivered`` (drained after a restart) is ``expected``, and EPHEMERAL what it kept."""
        delivered = bodies_and_attempts(delivered)
        ephemeral = delivered.pop(EPHEMERAL)
        assert delivered == expected
        assert ephemeral.total() == self.ephemeral_kept and set(ephemeral) <= set(once(bodies("tmp", 4)))

    async def close(self) -> None:
        for client in self.clients:
            await client.close()


async def mpublish(port: int, topic: str, messages: list[bytes]) -> None:
    client = await RawClient.connect(port)
    await client.send(mpub(topic, messages))
    assert await client.read_response() == b"OK"
    await client.close()


async def dpublish(port: int, topic: str, messages: list[bytes], delay_ms: int = LONG_MS) -> None:
    client = await RawClient.connect(port)
    for body in messages:
        await client.send(dpub(topic, delay_ms, body))
        assert await client.read_response() == b"OK"
    await client.close()


def once(messages: list[bytes], attempts: int = 1) -> Counter:
    return Counter((body, attempts) for body in messages)


async def defer_one_by_one(server: Server, topic: str, channel: str, messages: list[bytes]) -> list[bytes]:
    """DPUB each message to a topic with a channel; those that were queued at once instead of
    deferred. NSQ's nsqd with --mem-queue-size=0 defers a DPUB only if its topic's pump is waiting
    for it at that moment, else writes it to the topic's disk queue, where it loses its delay
    (nsqio/nsq#1375): on a loaded machine that happens."""
    queued = []
    for body in messages:
        before = queues_view(server)[topic]["channels"][channel]
        await dpublish(server.tcp_port, topic, [body])

        def arrived() -> bool:
            counts = queues_view(server)[topic]["channels"][channel]
            return counts["deferred_count"] + counts["depth"] == before["deferred_count"] + before["depth"] + 1

        await wait_until(arrived, what=f"{body!r} in {topic}:{channel}")
        if queues_view(server)[topic]["channels"][channel]["deferred_count"] == before["deferred_count"]:
            queued.append(body)
    return queued


async def write_everything(server: Server) -> Written:
    """One of everything a data directory holds: several topics, with and without channels,
    paused topics and channels, messages queued (as many and as large as the flags make spill),
    in flight, finished, deferred (DPUB, REQ with a delay), with attempts > 1, an ephemeral
    channel and an ephemeral topic with consumers; returns once nsqd holds it all."""
    port, clients = server.tcp_port, []
    # orders: messages in flight (one finished), a paused channel, an ephemeral one with a consumer
    await create_channel(port, "orders", "billing")
    await create_channel(port, "orders", "audit")
    http_post(server, "/channel/pause", topic="orders", channel="audit")
    clients.append(await subscribe(port, "orders", "watch#ephemeral"))
    await mpublish(port, "orders", ORDER_BODIES)
    billing = await subscribe(port, "orders", "billing", rdy=3)
    finished, *in_flight = await receive(billing, 3)
    await billing.send(b"RDY 0\nFIN " + finished.id + b"\n")  # in this order: no fourth delivery
    clients.append(billing)
    # retries: one message deferred by REQ after two deliveries, one in flight on its third
    retrier = await subscribe(port, "retries", "c", rdy=1)
    clients.append(retrier)
    await publish(port, "retries", [b"retry-deferred"])
    for delay_ms in (0, LONG_MS):
        msg = await retrier.read_message()
        await retrier.send(b"REQ %s %d\n" % (msg.id, delay_ms))
    await publish(port, "retries", [b"retry-in-flight"])
    for _ in range(2):
        msg = await retrier.read_message()
        await retrier.send(b"REQ %s 0\n" % msg.id)
    assert (await retrier.read_message()).attempts == 3
    # a topic without channels (its deferred messages wait for one), a paused topic, deferrals
    await mpublish(port, "lonely", bodies("lonely", 20))
    await dpublish(port, "lonely", bodies("lonely-deferred", 2))
    await create_channel(port, "held", "c")
    http_post(server, "/topic/pause", topic="held")
    await publish(port, "held", bodies("held", 15))
    await create_channel(port, "later", "c")
    later_queued = await defer_one_by_one(server, "later", "c", bodies("later", 3))
    await create_channel(port, "idle", "c")
    http_post(server, "/topic/create", topic="bare")
    # an ephemeral topic (never in nsqd.dat) with a durable channel (a disk queue) and a consumer
    clients.append(await subscribe(port, "tmp#ephemeral", "c"))
    await publish(port, "tmp#ephemeral", bodies("tmp", 4))

    def holds_everything() -> bool:
        view = queues_view(server)
        return (view["orders"]["depth"] == 0 and view["orders"]["channels"]["billing"]["in_flight_count"] == 2
                and view["retries"]["channels"]["c"]["in_flight_count"] == 1
                and view["retries"]["channels"]["c"]["deferred_count"] == 1
                and view["later"]["channels"]["c"]["deferred_count"] == 3 - len(later_queued))

    await wait_until(holds_everything, what="the writer to hold everything")
    # NSQ's ephemeral topic drops what its pump is too slow to take (it has no disk queue)
    ephemeral_kept = queues_view(server)[EPHEMERAL[0]]["channels"][EPHEMERAL[1]]["depth"]
    in_flight_bodies = [msg.body for msg in in_flight]
    queued_orders = once(ORDER_BODIES) - once([finished.body, *in_flight_bodies])
    after_stop = {
        ("orders", "billing"): queued_orders + once(in_flight_bodies, 2),
        ("orders", "audit"): once(ORDER_BODIES),
        ("retries", "c"): Counter({(b"retry-deferred", 3): 1, (b"retry-in-flight", 4): 1}),
        ("lonely", DRAIN_CHANNEL): once(bodies("lonely", 20) + bodies("lonely-deferred", 2)),
        ("held", "c"): once(bodies("held", 15)),
        ("later", "c"): once(bodies("later", 3)),
        ("idle", "c"): Counter(),
        ("bare", DRAIN_CHANNEL): Counter(),
    }
    # kill -9 with --mem-queue-size=0: in-flight and deferred messages are lost; a deferred message
    # of a topic without channels is in NSQ's disk queue (without its delay), in ours in memory
    kept_deferred = bodies("lonely-deferred", 2) if isinstance(server, GoServer) else []
    after_kill = {**after_stop, ("orders", "billing"): queued_orders, ("retries", "c"): Counter(),
                  ("lonely", DRAIN_CHANNEL): once(bodies("lonely", 20) + kept_deferred),
                  ("later", "c"): once(later_queued)}
    layout = {"orders": (False, {"billing": False, "audit": True}), "retries": (False, {"c": False}),
              "lonely": (False, {}), "held": (True, {"c": False}), "later": (False, {"c": False}),
              "idle": (False, {"c": False}), "bare": (False, {})}
    return Written(after_stop, after_kill, layout, ephemeral_kept, clients)


def layout_of(view: dict) -> dict:
    return {topic: (entry["paused"], {channel: counts["paused"] for channel, counts in entry["channels"].items()})
            for topic, entry in view.items()}


async def observe(server: Server, unread: dict[tuple[str, str], int] = {}) -> tuple[dict, dict]:
    """What a freshly started nsqd shows (/stats, settled), then every message it delivers, those
    of the ephemeral topic's durable channel too (created again); ``unread``: how many more than
    the depths say a channel has at least (records of queues without metadata, for ours)."""
    view = await settled_view(server)
    ephemeral_meta = meta_file(server.data_path, ":".join(EPHEMERAL))
    ephemeral_depth = parse_meta(ephemeral_meta)[0] if os.path.exists(ephemeral_meta) else 0
    more = {**unread, EPHEMERAL: unread.get(EPHEMERAL, 0) + ephemeral_depth}
    return view, await drain_everything(server, view, more)


async def observe_both(first: Server, second: Server, unread_by_first: dict[tuple[str, str], int] = {}
                       ) -> tuple[tuple[dict, dict], tuple[dict, dict]]:
    """``observe`` two nsqd at once."""
    seen = {}

    async def run(server: Server, unread: dict) -> None:
        seen[server] = await observe(server, unread)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, first, unread_by_first)
        nursery.start_soon(run, second, {})
    return seen[first], seen[second]


def copy_of(data_path, tmp_path, name: str = "reference"):
    copy = tmp_path / name
    shutil.copytree(data_path, copy)
    return copy


async def hand_over(tmp_path, writer: type[Server], reader: type[Server], flags: tuple[str, ...]):
    """``writer`` fills a data directory and stops gracefully; ``reader`` starts on it and
    ``writer``'s program on a copy. Both must show and deliver the same, which is what was written."""
    flags = (*NO_TIMEOUTS, *flags)
    data = tmp_path / "data"
    data.mkdir()
    server = writer(data, *flags)
    written = await write_everything(server)
    assert server.stop() == 0, server.log()
    await written.close()
    copy = copy_of(data, tmp_path)
    (taker_view, taker_delivered), (reference_view, reference_delivered) = await observe_both(
        reader(data, *flags), writer(copy, *flags))
    assert layout_of(reference_view) == written.layout
    assert taker_view == reference_view
    assert not differences(taker_delivered, reference_delivered), differences(taker_delivered, reference_delivered)
    written.check(reference_delivered, written.after_stop)


@pytest.mark.parametrize("flags", FLAG_SETS.values(), ids=FLAG_SETS.keys())
async def test_ours_takes_over_what_go_wrote_at_a_graceful_stop(tmp_path, flags):
    await hand_over(tmp_path, GoServer, Server, flags)


@pytest.mark.parametrize("flags", FLAG_SETS.values(), ids=FLAG_SETS.keys())
async def test_go_takes_over_what_ours_wrote_at_a_graceful_stop(tmp_path, flags):
    await hand_over(tmp_path, Server, GoServer, flags)


# -- kill -9 ----------------------------------------------------------------------------------------

KILL_FLAG_SETS = {
    # every message on disk, every read and write synced: what survives is exactly what NSQ promises
    "disk-synced": ("--mem-queue-size=0", "--max-bytes-per-file=1024", "--sync-every=1"),
    # go-diskqueue's default syncs: the metadata may be behind the data files, or not written yet
    "spill": FLAG_SETS["spill"],
}


def unlisted_deliveries(data_path, layout: dict) -> dict[tuple[str, str], Counter]:
    """Every record of a disk queue without metadata (see ``unlisted_records``) as the channel it
    goes to delivers it: what ours delivers beyond what NSQ does."""
    extra: dict[tuple[str, str], Counter] = {}
    for queue, messages in unlisted_records(data_path).items():
        topic, _, channel = queue.partition(":")
        if channel:
            keys = [(topic, channel)] if (topic, channel) == EPHEMERAL or channel in layout[topic][1] else []
        else:
            keys = [(topic, name) for name in layout[topic][1] or [DRAIN_CHANNEL]]
        for key in keys:
            extra.setdefault(key, Counter()).update(msg._replace(attempts=msg.attempts + 1) for msg in messages)
    return extra


async def take_over_after_a_kill(tmp_path, writer: type[Server], flags: tuple[str, ...]) -> None:
    """``writer`` fills a data directory and is killed; ours and NSQ's nsqd start on copies of it and
    deliver the same (ours also what NSQ leaves unread), and what NSQ promises where every queue is
    on disk and synced."""
    flags = (*NO_TIMEOUTS, *flags)
    data = tmp_path / "data"
    data.mkdir()
    server = writer(data, *flags)
    written = await write_everything(server)
    await wait_until(lambda: nsqd_dat_layout(data) == written.layout, what="nsqd.dat to list everything")
    synced = "--sync-every=1" in flags
    if synced:
        await wait_until(lambda: metadata_current(server), what="every disk queue's metadata to be written")
    server.kill()
    await written.close()
    copy = copy_of(data, tmp_path)
    unlisted = unlisted_deliveries(data, written.layout)
    (ours_view, ours_delivered), (go_view, go_delivered) = await observe_both(
        Server(data, *flags), GoServer(copy, *flags), {key: messages.total() for key, messages in unlisted.items()})
    if not unlisted:  # else ours moves more into the channels than NSQ sees
        assert ours_view == go_view
    expected = {key: messages + unlisted.get(key, Counter()) for key, messages in go_delivered.items()}
    assert not differences(ours_delivered, expected), differences(ours_delivered, expected)
    if synced:
        written.check(go_delivered, written.after_kill)


@pytest.mark.parametrize("flags", KILL_FLAG_SETS.values(), ids=KILL_FLAG_SETS.keys())
async def test_ours_takes_over_what_go_left_at_a_kill(tmp_path, flags):
    await take_over_after_a_kill(tmp_path, GoServer, flags)


@pytest.mark.parametrize("flags", KILL_FLAG_SETS.values(), ids=KILL_FLAG_SETS.keys())
async def test_go_takes_over_what_ours_left_at_a_kill(tmp_path, flags):
    await take_over_after_a_kill(tmp_path, Server, flags)


async def test_a_queue_killed_before_its_first_sync_is_read_by_ours_and_not_by_go(tmp_path):
    """NSQ's nsqd writes a disk queue's metadata at its first sync (--sync-timeout, 2 s by default):
    killed before, its records are on disk with no metadata, and NSQ reads the queue as empty (and
    writes over them). Ours reads them: a deliberate difference (README)."""
    data = tmp_path / "data"
    data.mkdir()
    server = GoServer(data, "--mem-queue-size=0", "--sync-timeout=1h")  # the first sync never comes
    await publish(server.tcp_port, "early", bodies("early", 5))
    server.kill()
    assert queue_files(data, "early") == ["early.diskqueue.000000.dat"]
    assert not os.path.exists(meta_file(data, "early"))
    copy = copy_of(data, tmp_path)
    ours = await take_all(Server(data).tcp_port, "early", "c", 5, 0.5)
    go = await take_all(GoServer(copy).tcp_port, "early", "c", 0, 1.0)
    assert go == []
    assert sorted(msg.body for msg in ours) == bodies("early", 5)
    assert [msg.attempts for msg in ours] == [1] * 5


# -- round trips and partly read queues ---------------------------------------------------------------

@pytest.mark.parametrize("flags", [FLAG_SETS["spill"], FLAG_SETS["disk"]], ids=["spill", "disk"])
async def test_go_then_ours_then_go_delivers_what_go_alone_would(tmp_path, flags):
    """NSQ's nsqd writes a data directory; ours runs on it (moving the topics' backlogs into their
    channels) and stops; NSQ's nsqd then delivers what it would have delivered without ours."""
    flags = (*NO_TIMEOUTS, *flags)
    data = tmp_path / "data"
    data.mkdir()
    server = GoServer(data, *flags)
    written = await write_everything(server)
    assert server.stop() == 0
    await written.close()
    untouched = copy_of(data, tmp_path, "untouched")
    ours = Server(data, *flags)
    await settled_view(ours)
    assert ours.stop() == 0, ours.log()
    assert nsqd_dat_layout(data) == written.layout
    (go_view, go_delivered), (alone_view, alone_delivered) = await observe_both(
        GoServer(data, *flags), GoServer(untouched, *flags))
    assert layout_of(go_view) == layout_of(alone_view) == written.layout
    assert go_delivered == alone_delivered
    written.check(go_delivered, written.after_stop)


DISK_ONLY = ("--mem-queue-size=0", "--max-bytes-per-file=300", *NO_TIMEOUTS)
# one size (38-byte records, 7 to a file): the files do not depend on the order NSQ writes
# the messages in flight at the stop in (its map's)
FIRST = [b"first-%02d" % i for i in range(4)]
SECOND = [b"again-%02d" % i for i in range(16)]


async def read_some_of_a_disk_backlog(server: Server) -> list[bytes]:
    """The same disk writes and reads on any nsqd: a paused topic's backlog, moved to its channel in
    two goes (the second after more writes rolled the file being read), then partly consumed: two
    messages finished, three in flight at the stop. Returns the finished bodies."""
    port = server.tcp_port
    await create_channel(port, "q", "c")
    http_post(server, "/topic/pause", topic="q")
    await publish(port, "q", FIRST)
    http_post(server, "/topic/unpause", topic="q")
    await wait_until(lambda: queues_view(server)["q"]["channels"]["c"]["depth"] == 4, what="the first backlog moved")
    http_post(server, "/topic/pause", topic="q")
    await publish(port, "q", SECOND)
    http_post(server, "/topic/unpause", topic="q")
    await wait_until(lambda: queues_view(server)["q"]["channels"]["c"]["depth"] == 20, what="the second backlog moved")
    consumer = await subscribe(port, "q", "c", rdy=5)
    taken = await receive(consumer, 5)
    await consumer.send(b"RDY 0\n" + b"".join(b"FIN " + msg.id + b"\n" for msg in taken[:2]))
    await wait_until(lambda: queues_view(server)["q"]["channels"]["c"]["in_flight_count"] == 3, what="two finished")
    assert server.stop() == 0, server.log()
    await consumer.close()
    return [msg.body for msg in taken[:2]]


async def test_the_same_writes_and_reads_leave_the_same_files(tmp_path):
    """go-diskqueue's files and nsqd.dat, byte for byte but for the messages' IDs and timestamps;
    then each nsqd takes over a copy of NSQ's partly read queues and delivers the same."""
    (tmp_path / "go").mkdir()
    (tmp_path / "ours").mkdir()
    go_finished = await read_some_of_a_disk_backlog(GoServer(tmp_path / "go", *DISK_ONLY))
    ours_finished = await read_some_of_a_disk_backlog(Server(tmp_path / "ours", *DISK_ONLY))
    assert ours_finished == go_finished == FIRST[:2]
    summary = directory_summary(tmp_path / "go")
    # 15 queued and the 3 in flight written back at the stop (7 records a file); 5 read of file 0
    assert summary["q:c.diskqueue.meta.dat"] == b"18\n0,190\n3,76\n"
    assert directory_summary(tmp_path / "ours") == summary

    copy = copy_of(tmp_path / "go", tmp_path)
    (ours_view, ours_delivered), (go_view, go_delivered) = await observe_both(
        Server(tmp_path / "go", *DISK_ONLY), GoServer(copy, *DISK_ONLY))
    assert ours_view == go_view
    assert ours_delivered == go_delivered
    left = FIRST[2:] + SECOND
    assert bodies_and_attempts(go_delivered)["q", "c"] == once(left[3:]) + once(left[:3], 2)


async def test_a_hand_made_directory_with_empty_large_and_retried_bodies(tmp_path):
    """Records no publisher can make (empty bodies: NSQ refuses them) or only many deliveries make
    (attempts 5, 65535), a 300 KB body, a read position past the first record: both nsqd deliver
    each as it is on disk, attempts raised by one (wrapping as a uint16)."""
    records = [payload(b"", b"00000000000000a0", 1_600_000_000_000_000_001, 0),  # read already
               payload(b"", b"00000000000000a1", 1_600_000_000_000_000_002, 5),
               payload(bytes(range(256)) * 1200, b"00000000000000a2", 1_600_000_000_000_000_003, 1),
               payload(b"x", b"00000000000000a3", 1_600_000_000_000_000_004, 65535),
               payload(b"last", b"00000000000000a4", 1_600_000_000_000_000_005, 2)]
    data = tmp_path / "data"
    data.mkdir()
    first, second = b"".join(map(record, records[:3])), b"".join(map(record, records[3:]))
    (data / "hand:c.diskqueue.000000.dat").write_bytes(first)
    (data / "hand:c.diskqueue.000001.dat").write_bytes(second)
    (data / "hand:c.diskqueue.meta.dat").write_text(meta_text(4, (0, len(record(records[0]))), (1, len(second))))
    (data / "nsqd.dat").write_bytes(go_encoding([("hand", False, [("c", False)])]))
    copy = copy_of(data, tmp_path)
    (ours_view, ours_delivered), (go_view, go_delivered) = await observe_both(Server(data), GoServer(copy))
    assert ours_view == go_view
    assert ours_view["hand"]["channels"]["c"]["depth"] == 4
    assert ours_delivered == go_delivered
    expected = [decode_message(p) for p in records[1:]]
    assert go_delivered["hand", "c"] == Counter(msg._replace(attempts=(msg.attempts + 1) % 65536) for msg in expected)


@pytest.mark.parametrize("damage", [struct.pack(">i", 5), struct.pack(">i", -1), struct.pack(">i", 500) + b"cut"],
                         ids=["too-short", "negative", "cut-off"])
async def test_a_corrupt_file_is_set_aside_alike(tmp_path, damage):
    """A record that cannot be read (a length below a message's header, a negative one, a record
    cut short): both rename its file ``.bad``, skip to the next and deliver the rest alike."""
    good = [payload(b"before", b"00000000000000b0"), payload(b"after-0", b"00000000000000b1"),
            payload(b"after-1", b"00000000000000b2")]
    data = tmp_path / "data"
    data.mkdir()
    (data / "bad:c.diskqueue.000000.dat").write_bytes(record(good[0]) + damage)
    (data / "bad:c.diskqueue.000001.dat").write_bytes(record(good[1]) + record(good[2]))
    (data / "bad:c.diskqueue.meta.dat").write_text(meta_text(3, (0, 0), (1, 2 * len(record(good[1])))))
    (data / "nsqd.dat").write_bytes(go_encoding([("bad", False, [("c", False)])]))
    copy = copy_of(data, tmp_path)
    (ours_view, ours_delivered), (go_view, go_delivered) = await observe_both(Server(data), GoServer(copy))
    assert ours_view == go_view
    assert ours_delivered == go_delivered
    assert sorted(msg.body for msg in go_delivered["bad", "c"]) == [b"after-0", b"after-1", b"before"]
    assert sorted(os.listdir(data)) == sorted(os.listdir(copy))
    assert (data / "bad:c.diskqueue.000000.dat.bad").exists()


@pytest.mark.parametrize("garbage", [b"garbage\n", b"\xff\x00\x01"], ids=["text", "binary"])
async def test_garbage_metadata_ours_reads_every_data_file_and_go_none(tmp_path, garbage):
    """README, Deliberate differences, Data directories: a disk queue whose metadata cannot be read.
    NSQ's nsqd starts it empty at file 0 (depth 0, none of the records delivered) and writes new
    messages over what file 0 held; ours delivers the records of every data file from their start
    (those of the first already read would come again: at least once) and writes after the last."""
    files = [[payload(b"file%d-%d" % (n, i), b"%016x" % (16 * n + i)) for i in range(3)] for n in range(3)]
    written = [decode_message(p).body for records in files for p in records]
    data = tmp_path / "data"
    data.mkdir()
    for n, records in enumerate(files):
        (data / f"junk:c.diskqueue.{n:06d}.dat").write_bytes(b"".join(map(record, records)))
    (data / "junk:c.diskqueue.meta.dat").write_bytes(garbage)
    (data / "nsqd.dat").write_bytes(go_encoding([("junk", False, [("c", False)])]))
    copy = copy_of(data, tmp_path)
    ours, go = Server(data, "--mem-queue-size=0"), GoServer(copy, "--mem-queue-size=0")
    (ours_view, ours_delivered), (go_view, go_delivered) = await observe_both(ours, go)
    assert [view["junk"]["channels"]["c"]["depth"] for view in (ours_view, go_view)] == [9, 0]
    assert sorted(msg.body for msg in ours_delivered["junk", "c"]) == written
    assert go_delivered["junk", "c"] == Counter()
    for server in (ours, go):
        await publish(server.tcp_port, "junk", [b"new"])
        assert [msg.body for msg in await take_all(server.tcp_port, "junk", "c", 1, 0.2)] == [b"new"]
        assert server.stop() == 0, server.log()
    assert queue_files(data, "junk:c") == ["junk:c.diskqueue.000003.dat"]
    assert queue_files(copy, "junk:c") == [f"junk:c.diskqueue.{n:06d}.dat" for n in range(3)]
    go_file_0 = (copy / "junk:c.diskqueue.000000.dat").read_bytes()
    assert decode_message(go_file_0[4:4 + struct.unpack(">i", go_file_0[:4])[0]]).body == b"new"  # written over
    assert (copy / "junk:c.diskqueue.000001.dat").read_bytes() == b"".join(map(record, files[1]))


# -- nsqd.dat -----------------------------------------------------------------------------------------

async def test_nsqd_dat_is_the_same_from_both(tmp_path):
    """For the same topics, channels and pauses, both write the same nsqd.dat (but for the order of
    topics and of channels, which NSQ takes from its maps)."""
    files = {}
    for program in (GoServer, Server):
        data = tmp_path / program.__name__
        data.mkdir()
        server = program(data, *NO_TIMEOUTS)
        written = await write_everything(server)
        assert server.stop() == 0
        await written.close()
        files[program] = normalised_nsqd_dat(nsqd_dat(data))
    assert files[Server] == files[GoServer]
    assert files[GoServer] == (
        b'{"topics":[{"name":"bare","paused":false,"channels":null},'
        b'{"name":"held","paused":true,"channels":[{"name":"c","paused":false}]},'
        b'{"name":"idle","paused":false,"channels":[{"name":"c","paused":false}]},'
        b'{"name":"later","paused":false,"channels":[{"name":"c","paused":false}]},'
        b'{"name":"lonely","paused":false,"channels":null},'
        b'{"name":"orders","paused":false,"channels":'
        b'[{"name":"audit","paused":true},{"name":"billing","paused":false}]},'
        b'{"name":"retries","paused":false,"channels":[{"name":"c","paused":false}]}],"version":"1.3.0"}')


def go_reading(data_path) -> str | tuple[dict, bytes]:
    """What NSQ's nsqd makes of the nsqd.dat in ``data_path``: the topics it starts with and the
    nsqd.dat it writes back, or why it refused to start."""
    try:
        server = GoServer(data_path)
    except RuntimeError as exc:
        return next(line for line in str(exc).splitlines() if "FATAL: " in line).split("FATAL: ", 1)[1].strip()
    reading = layout_of(queues_view(server)), normalised_nsqd_dat(nsqd_dat(data_path))
    assert server.stop() == 0
    return reading


async def ours_reading(data_path) -> str | tuple[dict, bytes]:
    """The same for ours (in this process: the start is what matters, and it is quicker)."""
    nsqd = NSQD(default_options(data_path=str(data_path), tcp_address="127.0.0.1:0", http_address="127.0.0.1:0"))
    refusals = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(nsqd.run)
            layout = {topic.name: (topic.paused, {channel.name: channel.paused for channel in topic.channels.values()})
                      for topic in nsqd.topics.values()}
            nsqd.stop()
    except* ValueError as refused:
        while isinstance(refused, BaseExceptionGroup):  # nsqd's nursery within this one
            refused = refused.exceptions[0]
        refusals = [str(refused)]
    return refusals[0] if refusals else (layout, normalised_nsqd_dat(nsqd_dat(data_path)))


NSQD_DATS = {
    "empty": b"",
    "null": b"null",
    "array": b"[]",
    "topics-not-a-list": b'{"topics":5}',
    "paused-not-a-bool": b'{"topics":[{"name":"a","paused":"yes"}]}',
    "paused-a-number": b'{"topics":[{"name":"a","paused":1}]}',
    "name-not-a-string": b'{"topics":[{"name":5}]}',
    "version-not-a-string": b'{"topics":null,"version":1.3}',
    "trailing-data": b'{"topics":null} {}',
    "keys-in-any-case": b'{"TOPICS":[{"NAME":"a","Paused":true,"CHANNELS":[{"nAmE":"c","PAUSED":true}]}]}',
    "nulls": b'{"topics":[null,{"name":"b","paused":null,"channels":[null,{"name":"c"}]}],"version":null}',
    "a-topic-twice": b'{"topics":[{"name":"a","paused":true},{"name":"a","channels":[{"name":"c"}]}]}',
    "a-key-twice": b'{"topics":[{"name":"x","paused":true,"name":"a"}]}',
    "unknown-keys": b'{"topics":[{"name":"a","owner":{"x":[1]},"channels":[{"name":"c","extra":null}]}],"more":1}',
    "spaces": b' \n{ "topics" : [ { "name" : "a" , "paused" : true } ] }\n',
    "ephemeral-names": b'{"topics":[{"name":"e#ephemeral","channels":[{"name":"c"},{"name":"d#ephemeral"}]},'
                       b'{"name":"f","channels":[{"name":"g#ephemeral","paused":true}]}]}',
    "name-lengths": b'{"topics":[{"name":"%s"},{"name":"%s"}]}' % (b"a" * 64, b"b" * 65),
}


@pytest.mark.parametrize("content", NSQD_DATS.values(), ids=NSQD_DATS.keys())
async def test_both_read_an_nsqd_dat_alike(tmp_path, content):
    """What NSQ's nsqd makes of an nsqd.dat (topics, channels, pauses; or a refusal to start with
    ``failed to load metadata - failed to parse metadata in <path> - <why>``), ours makes of it."""
    readings = {}
    for program in ("go", "ours"):
        data = tmp_path / program
        data.mkdir()
        (data / "nsqd.dat").write_bytes(content)
        reading = go_reading(data) if program == "go" else await ours_reading(data)
        if isinstance(reading, str):
            assert reading.startswith(f"failed to load metadata - failed to parse metadata in {data / 'nsqd.dat'} - ")
            reading = "refused"
        readings[program] = reading
    assert readings["ours"] == readings["go"]


async def test_without_nsqd_dat_queues_come_back_when_their_topic_and_channel_do(tmp_path):
    """nsqd.dat lost: both start with no topics, and a topic or channel created again takes up its
    disk queue's backlog."""
    data = tmp_path / "data"
    data.mkdir()
    server = GoServer(data, *NO_TIMEOUTS, *FLAG_SETS["spill"])
    written = await write_everything(server)
    assert server.stop() == 0
    await written.close()
    (data / "nsqd.dat").unlink()
    copy = copy_of(data, tmp_path)
    delivered = {}
    for program, path in ((Server, data), (GoServer, copy)):
        server = program(path, *NO_TIMEOUTS, *FLAG_SETS["spill"])
        assert queues_view(server) == {}
        assert nsqd_dat(path) == b'{"topics":null,"version":"1.3.0"}'
        wanted = {key: written.after_stop[key].total() for key in [("orders", "billing"), ("held", "c")]}
        delivered[program] = await drain_everything(server, {}, wanted)
    assert delivered[Server] == delivered[GoServer]
    assert bodies_and_attempts(delivered[GoServer]) == {
        ("orders", "billing"): written.after_stop["orders", "billing"], ("held", "c"): once(bodies("held", 15))}


async def test_the_old_nsqd_id_dat_name_is_ignored_by_both(tmp_path):
    """NSQ before v1.2 read ``nsqd.<node-id>.dat`` too; NSQ v1.3 reads only nsqd.dat, and so do we:
    a directory with only the old name starts empty, and the old file stays as it was."""
    old = b'{"topics":[{"name":"old","paused":true,"channels":null}],"version":"1.0.0-compat"}'
    for program in (GoServer, Server):
        data = tmp_path / program.__name__
        data.mkdir()
        (data / "nsqd.617.dat").write_bytes(old)
        server = program(data, "--node-id=617")
        assert queues_view(server) == {}
        assert server.stop() == 0
        assert nsqd_dat(data) == b'{"topics":null,"version":"1.3.0"}'
        assert (data / "nsqd.617.dat").read_bytes() == old


# -- what ours adds to a data directory ---------------------------------------------------------------

async def test_go_ignores_the_files_and_keys_of_our_opt_in_features(tmp_path):
    """Ours with --persist-deferred (deferred messages in files of their own), --max-attempts,
    --msg-ttl, a channel's pace and a topic's queue bound (extra nsqd.dat keys): NSQ's nsqd starts on the directory, ignores those, and delivers
    everything else. One run of ours without the flag hands the deferred messages back NSQ's way."""
    data = tmp_path / "data"
    data.mkdir()
    flags = (*NO_TIMEOUTS, "--persist-deferred", "--max-attempts=50", "--msg-ttl=1h")
    server = Server(data, *flags)
    written = await write_everything(server)
    http_post(server, "/topic/ttl", topic="orders", ttl="2h")
    http_post(server, "/channel/max_attempts", topic="retries", channel="c", max_attempts="9")
    http_post(server, "/channel/pace", topic="retries", channel="c", rate="5000")
    http_post(server, "/topic/max_queue_bytes", topic="orders", max_queue_bytes="10485760")
    assert server.stop() == 0
    await written.close()
    extras = nsqd_dat(data)
    assert b'"msg_ttl":7200000' in extras and b'"max_attempts":9' in extras
    assert b'"max_attempts":9,"pace":5000' in extras and b'"max_queue_bytes":10485760' in extras
    deferred_files = {path.name: path.read_bytes() for path in data.glob("*.deferred.dat")}
    assert sorted(deferred_files) == ["later:c.deferred.dat", "lonely.deferred.dat", "retries:c.deferred.dat"]

    go = GoServer(data, *NO_TIMEOUTS)
    go_view, go_delivered = await observe(go)
    assert layout_of(go_view) == written.layout
    deferred = {("retries", "c"): Counter({(b"retry-deferred", 3): 1}), ("later", "c"): once(bodies("later", 3)),
                ("lonely", DRAIN_CHANNEL): once(bodies("lonely-deferred", 2))}
    written.check(go_delivered, {key: expected - deferred.get(key, Counter())
                                 for key, expected in written.after_stop.items()})
    assert go.stop() == 0
    assert {path.name: path.read_bytes() for path in data.glob("*.deferred.dat")} == deferred_files
    assert b"msg_ttl" not in nsqd_dat(data)  # NSQ rewrites nsqd.dat with its own keys only

    ours = Server(data, *NO_TIMEOUTS)  # without --persist-deferred: the files go back into the queues
    await settled_view(ours)
    assert ours.stop() == 0
    assert list(data.glob("*.deferred.dat")) == []
    _, go_delivered = await observe(GoServer(data, *NO_TIMEOUTS))
    delivered = {key: counts for key, counts in bodies_and_attempts(go_delivered).items() if counts}
    assert delivered == deferred
