"""Bounded queues (--max-queue-bytes, --queue-full, POST /topic/max_queue_bytes) against real nsqd
processes: refuse keeps every acknowledged message and refuses the rest loudly, drop-oldest drops
and counts the oldest, the fill shows in /stats and /metrics, the bound persists in nsqd.dat, and a
bound below the disk's size keeps a small disk from filling (the 2 MiB tmpfs of
test_nsqd_diskfull)."""

from collections import Counter

import httpx
import pytest

from common.goflags import FlagError
from common.message import HEADER_LENGTH
from nsqd.options import default_options, load_options

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import Server, drain, mpub, multiset, nsqd_dat, pub, publish, restart, subscribe
from .helpers import NsqdProcess, RawClient
from .test_nsqd_diskfull import small_fs  # noqa: F401 (a fixture)

BODY = 74  # a message of 100 bytes as counted: 26 of header and the body
LARGE_BODY = 8192 - HEADER_LENGTH


def body(n: int, size: int = BODY) -> bytes:
    return (b"%04d" % n).ljust(size, b".")


def post(server, path: str, **params) -> httpx.Response:
    return httpx.post(f"{server.http}{path}", params=params)


def topic_stats(server, topic: str) -> dict:
    document = httpx.get(f"{server.http}/stats", params={"format": "json", "topic": topic}).json()
    return document["topics"][0]


def channel_stats(server, topic: str, channel: str) -> dict:
    return next(c for c in topic_stats(server, topic)["channels"] if c["channel_name"] == channel)


async def publish_until_refused(port: int, topic: str, count: int, size: int = BODY) -> tuple[list[bytes], bytes]:
    """PUB ``count`` bodies one at a time until one is refused; the accepted ones and the error
    (b"" if none was). A refusal closes the connection, as every E_PUB_FAILED does."""
    client = await RawClient.connect(port)
    accepted = []
    for n in range(count):
        await client.send(pub(topic, body(n, size)))
        frame = await client.read_any_frame()
        if frame.data != b"OK":
            await client.assert_closed()
            return accepted, frame.data
        accepted.append(body(n, size))
    await client.close()
    return accepted, b""


async def test_refuse_keeps_what_it_acknowledged_and_refuses_the_rest(tmp_path):
    flags = ("--max-queue-bytes=2000", "--mem-queue-size=5", "--max-bytes-per-file=512")
    server = Server(tmp_path, *flags)
    assert post(server, "/channel/create", topic="t", channel="c").status_code == 404
    assert post(server, "/topic/create", topic="t").status_code == 200
    assert post(server, "/channel/create", topic="t", channel="c").status_code == 200
    accepted, error = await publish_until_refused(server.tcp_port, "t", 30)
    assert len(accepted) == 20  # 20 messages of 100 bytes: the bound, in memory and on disk
    assert error == b"E_PUB_FAILED PUB failed queue full: channel t:c holds 2000 of its 2000 bytes"
    refused = httpx.post(f"{server.http}/pub", params={"topic": "t"}, content=b"one more")
    assert (refused.status_code, refused.json()) == (503, {"message": "QUEUE_FULL"})
    client = await RawClient.connect(server.tcp_port)
    await client.send(mpub("t", [b"a", b"b"]))
    assert (await client.read_error()).startswith(b"E_MPUB_FAILED MPUB failed queue full")
    topic, channel = topic_stats(server, "t"), channel_stats(server, "t", "c")
    assert (topic["max_queue_bytes"], topic["queue_full"], topic["refused_count"]) == (2000, "refuse", 4)
    assert (channel["queue_bytes"], channel["max_queue_bytes"], channel["depth"]) == (2000, 2000, 20)
    assert channel["backend_depth"] == 15
    metrics = httpx.get(f"{server.http}/metrics").text
    assert 'nsq_channel_queue_bytes{topic="t",channel="c"} 2000' in metrics
    assert 'nsq_topic_queue_refused_total{topic="t"} 4' in metrics

    consumer = await subscribe(server.tcp_port, "t", "c", rdy=1)
    taken = await consumer.read_message()
    await consumer.send(b"RDY 0\n")
    more, _ = await publish_until_refused(server.tcp_port, "t", 1)  # room for one again
    assert len(more) == 1
    await consumer.send(b"REQ " + taken.id + b" 0\n")  # accepted once: it goes back, past the bound
    await consumer.close()
    server = restart(server, *flags)  # the count starts again from memory and disk
    assert channel_stats(server, "t", "c")["queue_bytes"] == 2100
    got = await drain(server.tcp_port, "t", "c", 21)
    assert multiset(got) == Counter(accepted + more)  # every acknowledged message, once
    assert channel_stats(server, "t", "c")["queue_bytes"] == 0
    assert server.stop() == 0


async def test_one_full_channel_refuses_the_topic_and_drop_oldest_drops_per_channel(tmp_path):
    (tmp_path / "refuse").mkdir()
    (tmp_path / "drop").mkdir()
    refusing = Server(tmp_path / "refuse", "--max-queue-bytes=1000")
    dropping = Server(tmp_path / "drop", "--max-queue-bytes=1000", "--queue-full=drop-oldest")
    for server in (refusing, dropping):
        keeping_up = await subscribe(server.tcp_port, "t", "fast", rdy=100)
        await (await subscribe(server.tcp_port, "t", "slow")).close()
        accepted, error = await publish_until_refused(server.tcp_port, "t", 15)
        fast = [(await keeping_up.read_message()).body for _ in accepted]
        assert fast == accepted  # the channel that keeps up gets every accepted message
        await keeping_up.close()
        server.accepted, server.error = accepted, error
    assert (len(refusing.accepted), refusing.error[:35]) == (10, b"E_PUB_FAILED PUB failed queue full:")
    assert multiset(await drain(refusing.tcp_port, "t", "slow", 10)) == Counter(refusing.accepted)
    assert (len(dropping.accepted), dropping.error) == (15, b"")
    slow = await drain(dropping.tcp_port, "t", "slow", 10)
    assert [m.body for m in slow] == dropping.accepted[5:]  # the 5 oldest were dropped
    dropped = [channel_stats(dropping, "t", channel)["dropped_count"] for channel in ("slow", "fast")]
    assert dropped == [5, 0]
    assert topic_stats(dropping, "t")["refused_count"] == 0
    for server in (refusing, dropping):
        assert server.stop() == 0


async def test_drop_oldest_drops_the_oldest_of_memory_and_disk(tmp_path):
    server = Server(tmp_path, "--max-queue-bytes=1000", "--queue-full=drop-oldest", "--mem-queue-size=3",
                    "--max-bytes-per-file=300")
    await (await subscribe(server.tcp_port, "t", "c")).close()
    await publish(server.tcp_port, "t", [body(n) for n in range(40)])
    stats = channel_stats(server, "t", "c")
    assert (stats["queue_bytes"], stats["depth"], stats["dropped_count"]) == (1000, 10, 30)
    assert sorted(m.body for m in await drain(server.tcp_port, "t", "c", 10)) == [body(n) for n in range(30, 40)]
    assert server.stop() == 0


async def test_a_topics_own_bound_over_http_is_kept_in_nsqd_dat(tmp_path):
    server = Server(tmp_path, "--max-queue-bytes=1000000")
    assert post(server, "/topic/create", topic="small").status_code == 200
    assert post(server, "/topic/create", topic="usual").status_code == 200
    assert post(server, "/topic/max_queue_bytes", topic="small", max_queue_bytes="300").status_code == 200
    assert b'{"name":"small","paused":false,"channels":null,"max_queue_bytes":300}' in nsqd_dat(tmp_path)
    accepted, error = await publish_until_refused(server.tcp_port, "small", 5)  # no channel: the topic's queue
    assert len(accepted) == 3 and error.endswith(b"topic small holds 300 of its 300 bytes")
    assert topic_stats(server, "usual")["max_queue_bytes"] == 1000000
    server = restart(server)  # no flag: the topic's own bound stays, the other topic is unbounded
    assert (topic_stats(server, "small")["max_queue_bytes"], topic_stats(server, "small")["queue_bytes"]) == (300, 300)
    assert "max_queue_bytes" not in topic_stats(server, "usual")  # NSQ's keys only
    assert post(server, "/topic/max_queue_bytes", topic="small", max_queue_bytes="0").status_code == 200
    assert len((await publish_until_refused(server.tcp_port, "small", 5))[0]) == 5
    assert post(server, "/topic/max_queue_bytes", topic="small", max_queue_bytes="default").status_code == 200
    assert b"max_queue_bytes" not in nsqd_dat(tmp_path)
    assert server.stop() == 0


async def test_a_bound_keeps_a_small_disk_from_filling(small_fs):  # noqa: F811 (the fixture)
    """A 2 MiB file system and a 1 MiB bound: under drop-oldest every publish of 3 MiB is accepted
    and the newest MiB is delivered; under refuse the disk never fills, and after a restart every
    acknowledged message is there."""
    # --sync-every=1: a data file read to its end is deleted, but its space comes back only once the
    # writer's descriptor is closed, at the next sync (README "Bounded queues")
    flags = ("--mem-queue-size=0", "--max-bytes-per-file=65536", "--max-queue-bytes=1048576", "--sync-every=1")
    for policy in ("drop-oldest", "refuse"):
        path = small_fs / policy
        path.mkdir()
        server = Server(path, *flags, f"--queue-full={policy}")
        await (await subscribe(server.tcp_port, "big", "c")).close()
        accepted, error = await publish_until_refused(server.tcp_port, "big", 384, LARGE_BODY)
        assert httpx.get(f"{server.http}/ping").text == "OK", policy  # never a disk error
        kept = 128  # 1 MiB of 8 KiB messages
        if policy == "refuse":
            assert (len(accepted), error[:35]) == (kept, b"E_PUB_FAILED PUB failed queue full:")
        else:
            assert (len(accepted), error) == (384, b"")
            assert channel_stats(server, "big", "c")["dropped_count"] == 384 - kept
        server = restart(server, *flags, f"--queue-full={policy}")
        got = await drain(server.tcp_port, "big", "c", kept)
        assert multiset(got) == Counter(accepted[-kept:])
        assert server.stop() == 0
        for leftover in path.iterdir():
            leftover.unlink()


@pytest.mark.parametrize("params, status, message", [
    ({"max_queue_bytes": "-1"}, 400, "INVALID_ARG_MAX_QUEUE_BYTES"),
    ({"max_queue_bytes": "abc"}, 400, "INVALID_ARG_MAX_QUEUE_BYTES"),
    ({"max_queue_bytes": "1e30"}, 400, "INVALID_ARG_MAX_QUEUE_BYTES"),
    ({"max_queue_bytes": str(1 << 63)}, 400, "INVALID_ARG_MAX_QUEUE_BYTES"),
    ({"max_queue_bytes": "1 000"}, 400, "INVALID_ARG_MAX_QUEUE_BYTES"),
    ({}, 400, "MISSING_ARG_MAX_QUEUE_BYTES"),
    ({"max_queue_bytes": "5", "topic": "nosuch"}, 404, "TOPIC_NOT_FOUND"),
    ({"max_queue_bytes": "5", "topic": "bad name!"}, 400, "INVALID_TOPIC"),
])
def test_bad_bounds_get_nsq_style_errors(shared_server, params, status, message):
    response = post(shared_server, "/topic/max_queue_bytes", **{"topic": "t", **params})
    assert (response.status_code, response.json()) == (status, {"message": message})
    assert "max_queue_bytes" not in topic_stats(shared_server, "t")  # nothing changed


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    server = NsqdProcess(f"--data-path={tmp_path_factory.mktemp('bound')}")  # not one kill_leftover_servers stops
    server.http = f"http://127.0.0.1:{server.http_port}"
    assert post(server, "/topic/create", topic="t").status_code == 200
    yield server
    assert server.stop() == 0


@pytest.mark.parametrize("argv", [["--max-queue-bytes=-1"], ["--max-queue-bytes=1e30"],
                                  ["--max-queue-bytes=99999999999999999999"], ["--queue-full=block"]])
def test_bad_bound_flags_are_refused(argv):
    with pytest.raises(FlagError):
        load_options(argv)


def test_the_config_file_keys(tmp_path):
    config = tmp_path / "nsqd.cfg"
    config.write_text('max_queue_bytes = 1073741824\nqueue_full = "drop-oldest"\n')
    opts = load_options([f"--config={config}"])
    assert (opts.max_queue_bytes, opts.queue_full) == (1 << 30, "drop-oldest")
    config.write_text("max_queue_bytes = 1e30\n")
    with pytest.raises(FlagError):
        load_options([f"--config={config}"])
    assert (default_options().max_queue_bytes, default_options().queue_full) == (0, "refuse")
