"""nsqd.dat and the data-directory lock (NSQ v1.3's nsqd/nsqd.go).

nsqd.dat is Go's json.Marshal of nsqd's Metadata structs: keys in field order
(``topics``, ``version``; ``name``, ``paused``, ``channels``), no spaces, an empty list as
``null``, ephemeral topics and channels left out. It is replaced atomically (temp file,
fsync, rename) on startup, topic/channel create and delete, pause/unpause and shutdown.
"""

import json
import os
import stat
import subprocess
import sys
import threading
from collections import Counter

import httpx

from .datadir import kill_leftover_servers  # noqa: F401 (an autouse fixture)
from .datadir import Server, bodies, drain, go_encoding, nsqd_dat, publish, restart, subscribe, wait_until
from .helpers import ROOT

EMPTY = b'{"topics":null,"version":"1.3.0"}'


class Http:
    def __init__(self, server: Server):
        self.base = server.http

    def post(self, path: str, **params) -> None:
        answer = httpx.post(self.base + path, params=params)
        assert answer.status_code == 200, (path, params, answer.text)


def tmp_files(data_path) -> list[str]:
    return [name for name in os.listdir(data_path) if name.endswith(".tmp")]


async def test_nsqd_dat_follows_every_change_in_nsq_json(tmp_path):
    server = Server(tmp_path)
    http = Http(server)
    assert nsqd_dat(tmp_path) == EMPTY  # written at startup

    previous = open(tmp_path / "nsqd.dat", "rb")  # held open, so its inode cannot be reused

    async def expect(topics, wait: bool = True) -> None:
        nonlocal previous
        expected = go_encoding(topics)
        if wait:  # create and delete are saved by a worker, soon after the answer
            await wait_until(lambda: nsqd_dat(tmp_path) == expected, what=expected.decode())
        assert nsqd_dat(tmp_path) == expected
        assert stat.S_IMODE(os.stat(tmp_path / "nsqd.dat").st_mode) == 0o600
        # replaced by a rename, never rewritten in place: the old file is unlinked and whole
        assert os.fstat(previous.fileno()).st_nlink == 0
        json.loads(previous.read())
        previous.close()
        previous = open(tmp_path / "nsqd.dat", "rb")

    http.post("/topic/create", topic="orders")
    await expect([("orders", False, [])])
    http.post("/channel/create", topic="orders", channel="billing")
    ephemeral_consumer = await subscribe(server.tcp_port, "orders", "tail#ephemeral")
    http.post("/topic/create", topic="scratch#ephemeral")
    await subscribe(server.tcp_port, "scratch#ephemeral", "c")
    await expect([("orders", False, [("billing", False)])])

    # pause and unpause are saved before the answer
    http.post("/channel/pause", topic="orders", channel="billing")
    await expect([("orders", False, [("billing", True)])], wait=False)
    http.post("/topic/pause", topic="orders")
    await expect([("orders", True, [("billing", True)])], wait=False)
    http.post("/topic/unpause", topic="orders")
    await expect([("orders", False, [("billing", True)])], wait=False)
    http.post("/channel/unpause", topic="orders", channel="billing")
    await expect([("orders", False, [("billing", False)])], wait=False)

    http.post("/topic/create", topic="audit")
    await expect([("orders", False, [("billing", False)]), ("audit", False, [])])
    http.post("/channel/delete", topic="orders", channel="billing")
    await expect([("orders", False, []), ("audit", False, [])])
    http.post("/topic/delete", topic="audit")
    await expect([("orders", False, [])])
    await ephemeral_consumer.close()
    previous.close()

    await wait_until(lambda: not tmp_files(tmp_path), what="temp files gone")
    assert server.stop() == 0
    assert nsqd_dat(tmp_path) == go_encoding([("orders", False, [])])


async def test_nsqd_dat_is_never_seen_half_written(tmp_path):
    server = Server(tmp_path)
    http = Http(server)
    seen: list[bytes] = []
    done = threading.Event()

    def read_continuously() -> None:
        while not done.is_set():
            seen.append(nsqd_dat(tmp_path))

    reader = threading.Thread(target=read_continuously)
    reader.start()
    try:
        for i in range(15):
            http.post("/topic/create", topic=f"t{i}")
            http.post("/channel/create", topic=f"t{i}", channel="c")
        http.post("/topic/delete", topic="t0")
        await wait_until(lambda: b'"t14","paused":false,"channels":[' in nsqd_dat(tmp_path), what="last channel")
    finally:
        done.set()
        reader.join()
    assert len(set(seen)) > 3
    for data in set(seen):
        document = json.loads(data)  # never empty or cut short
        assert document["version"] == "1.3.0"
    assert server.stop() == 0
    assert not tmp_files(tmp_path)


async def test_topics_channels_and_pause_states_restored_on_restart(tmp_path):
    server = Server(tmp_path)
    http = Http(server)
    http.post("/topic/create", topic="orders")
    http.post("/channel/create", topic="orders", channel="billing")
    http.post("/channel/create", topic="orders", channel="shipping")
    http.post("/channel/pause", topic="orders", channel="billing")
    http.post("/topic/create", topic="events")
    http.post("/channel/create", topic="events", channel="c")
    http.post("/topic/pause", topic="events")
    http.post("/topic/create", topic="bare")
    await publish(server.tcp_port, "orders", bodies("o", 4))
    await publish(server.tcp_port, "events", bodies("e", 4))
    saved = go_encoding([("orders", False, [("billing", True), ("shipping", False)]),
                         ("events", True, [("c", False)]), ("bare", False, [])])
    await wait_until(lambda: nsqd_dat(tmp_path) == saved, what="nsqd.dat")

    server = restart(server)
    http = Http(server)
    assert nsqd_dat(tmp_path) == saved  # rewritten at startup, unchanged
    # the unpaused channel delivers; the paused channel and the paused topic hold theirs
    assert Counter(msg.body for msg in await drain(server.tcp_port, "orders", "shipping", 4)) \
        == Counter(bodies("o", 4))
    billing = await subscribe(server.tcp_port, "orders", "billing", rdy=10)
    events = await subscribe(server.tcp_port, "events", "c", rdy=10)
    await billing.assert_no_frame(0.3)
    await events.assert_no_frame(0.01)
    http.post("/channel/unpause", topic="orders", channel="billing")
    http.post("/topic/unpause", topic="events")
    assert sorted([(await billing.read_message()).body for _ in range(4)]) == sorted(bodies("o", 4))
    assert sorted([(await events.read_message()).body for _ in range(4)]) == sorted(bodies("e", 4))
    assert server.stop() == 0


async def test_invalid_names_in_nsqd_dat_are_skipped(tmp_path):
    (tmp_path / "nsqd.dat").write_bytes(
        b'{"topics":[{"name":"bad topic","paused":false,"channels":null},'
        b'{"name":"good","paused":true,"channels":[{"name":"bad/channel","paused":false},'
        b'{"name":"fine","paused":true}]}],"version":"1.3.0"}')
    server = Server(tmp_path)
    assert nsqd_dat(tmp_path) == go_encoding([("good", True, [("fine", True)])])
    assert "skipping creation of invalid topic bad topic" in server.log()
    assert "skipping creation of invalid channel bad/channel" in server.log()
    assert server.stop() == 0


def run_nsqd(data_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsqd", f"--data-path={data_path}", "--tcp-address=127.0.0.1:0",
                           "--http-address=127.0.0.1:0"], cwd=ROOT, capture_output=True, text=True, timeout=15)


async def test_a_second_nsqd_on_the_same_data_path_exits_1(tmp_path):
    server = Server(tmp_path)
    second = run_nsqd(tmp_path)
    assert second.returncode == 1
    assert f"--data-path={tmp_path} in use (possibly by another instance of nsqd)" in second.stderr
    await publish(server.tcp_port, "still", [b"serving"])  # the first one is unaffected
    assert [msg.body for msg in await drain(server.tcp_port, "still", "c", 1)] == [b"serving"]
    assert server.stop() == 0
    again = Server(tmp_path)  # the lock goes with the process that held it
    assert again.stop() == 0


async def test_a_corrupt_nsqd_dat_stops_startup(tmp_path):
    (tmp_path / "nsqd.dat").write_bytes(b'{"topics":[{"name":')
    result = run_nsqd(tmp_path)
    assert result.returncode == 1
    assert f"FATAL: failed to load metadata - failed to parse metadata in {tmp_path / 'nsqd.dat'} - " in result.stderr
    assert (tmp_path / "nsqd.dat").read_bytes() == b'{"topics":[{"name":'  # left for the operator
