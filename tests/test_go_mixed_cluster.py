"""Mixed clusters of real processes: NSQ v1.3.0's nsqd and nsqlookupd (Go) beside this project's.

One cluster for the module: Go's nsqlookupd and ours, Go's nsqd and ours, each nsqd registered with
both lookupds. So Go's nsqd is registered with our nsqlookupd and ours with Go's, and the two
lookupds hold the same registrations: their HTTP answers must be the same documents once what
legitimately differs is set aside (the ephemeral port each nsqd connects from, Go's random map
order, timestamps). Consumers written by others (pynsq, nsqjs, NSQ's nsq_tail) and our nsqclient
discover both nsqd through each lookupd and must get every message of both.
"""

import collections
import json
import shutil
import subprocess
from pathlib import Path

import anyio
import httpx
import nsq
import pytest
import trio

from nsqclient import Consumer, Message

from .go_nsq import GoLookupdProcess, GoNsqdProcess, go_program, requires_go
from .helpers import NsqdProcess
from .lookupd_helpers import LookupdProcess, Peer
from .test_pynsq_features import compressed_socket_shim  # noqa: F401 (fixture)
from .test_pynsq_interop import TornadoLoop
from .utils_helpers import http, publish, wait_until
from .waiting import await_until

pytestmark = requires_go

NSQJS = Path(__file__).resolve().parent / "nsqjs"
PER_NSQD = 40  # messages each nsqd holds for a consumer


class MixedCluster:
    """Go's nsqlookupd and ours; Go's nsqd and ours, each registered with both lookupds."""

    def __init__(self, data_dir: Path, *lookupd_args: str):
        self.lookupds = {"go": GoLookupdProcess("--broadcast-address=127.0.0.1", *lookupd_args),
                         "ours": LookupdProcess("--broadcast-address=127.0.0.1", *lookupd_args)}
        registrations = [f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}" for lookupd in self.lookupds.values()]
        self.nsqds = {}
        for kind, process in (("go", GoNsqdProcess), ("ours", NsqdProcess)):
            path = data_dir / f"nsqd-{kind}"
            path.mkdir()
            self.nsqds[kind] = process(f"--data-path={path}", "--broadcast-address=127.0.0.1", *registrations)

    def lookupd_url(self, kind: str) -> str:
        return f"http://127.0.0.1:{self.lookupds[kind].http_port}"

    def connected(self) -> bool:
        """Whether both lookupds list both nsqd and ours has both lookupds' answers: until then a
        topic created on an nsqd finds no lookupd to ask for its channels, which both log as an
        ERROR."""
        if self.nsqds["ours"].log().count("): peer info ") < 2:
            return False
        for kind in self.lookupds:
            answer = httpx.get(self.lookupd_url(kind) + "/nodes", timeout=5)
            if answer.status_code != 200 or len(answer.json()["producers"]) != 2:
                return False
        return True

    def registered(self, topic: str, channels: int = 0) -> bool:
        """Whether both lookupds list both nsqd for ``topic`` (and ``channels`` channels of it)."""
        for kind in self.lookupds:
            answer = httpx.get(self.lookupd_url(kind) + "/lookup", params={"topic": topic}, timeout=5)
            if answer.status_code != 200:
                return False
            document = answer.json()
            if len(document["producers"]) != 2 or len(document["channels"]) != channels:
                return False
        return True

    def stop(self) -> list[int]:
        return [process.stop() for process in [*self.nsqds.values(), *self.lookupds.values()]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    running = MixedCluster(tmp_path_factory.mktemp("mixed"), "--tombstone-lifetime=8s")
    wait_until(running.connected, what="both nsqd connected to both lookupds")
    yield running
    assert running.stop() == [0, 0, 0, 0]
    for ours in (running.nsqds["ours"], running.lookupds["ours"]):
        assert "ERROR" not in ours.log() and "Traceback" not in ours.log(), ours.log()


def create(cluster: MixedCluster, topic: str, *channels: str) -> None:
    """``topic`` and its ``channels`` on both nsqd, once both lookupds know them all."""
    for nsqd in cluster.nsqds.values():
        http(nsqd.http_port, f"/topic/create?topic={topic}", method="POST")
        for channel in channels:
            http(nsqd.http_port, f"/channel/create?topic={topic}&channel={channel}", method="POST")
    wait_until(lambda: cluster.registered(topic, len(channels)), what=f"{topic} registered with both lookupds")


# What legitimately differs between two lookupds holding the same registrations: the port each nsqd
# connects from (remote_address, /debug's id), when they last heard from it or tombstoned it, and the
# order of lists (Go's come from map iteration, in random order).

def producer_key(producer: dict) -> tuple:
    return producer["broadcast_address"], producer["tcp_port"], producer["http_port"]


def normal_producer(producer: dict) -> dict:
    producer = {key: value for key, value in producer.items() if key not in ("remote_address", "id", "last_update")}
    if producer.get("tombstoned_at", 0) > 0:
        producer["tombstoned_at"] = "a time"
    if "topics" in producer:
        pairs = sorted(zip(producer["topics"], producer["tombstones"]))
        producer["topics"], producer["tombstones"] = [t for t, _ in pairs], [tombstoned for _, tombstoned in pairs]
    return producer


def normal(document):
    """A lookupd answer with the differences above set aside, for comparison."""
    if isinstance(document, list):
        if all(isinstance(item, dict) and "tcp_port" in item for item in document):
            return [normal_producer(item) for item in sorted(document, key=producer_key)]
        return sorted(document)
    if isinstance(document, dict):
        return {key: normal(value) for key, value in document.items()}
    return document


HEADERS = ("content-type", "x-nsq-content-type", "allow")


def both_answers(cluster: MixedCluster, method: str, path: str) -> dict[str, tuple]:
    """(status, content type, X-NSQ-Content-Type, Allow, normalised body) from each lookupd."""
    answers = {}
    for kind in cluster.lookupds:
        response = httpx.request(method, cluster.lookupd_url(kind) + path, timeout=5)
        json_body = response.content and response.headers.get("content-type", "").startswith("application/json")
        body = response.json() if json_body else response.text
        answers[kind] = (response.status_code, *(response.headers.get(name) for name in HEADERS), normal(body))
    return answers


def assert_same_answers(cluster: MixedCluster, requests: list[tuple[str, str]]) -> None:
    for method, path in requests:
        answers = both_answers(cluster, method, path)
        assert answers["ours"] == answers["go"], f"{method} {path}"


def test_both_lookupds_list_both_nsqd_alike(cluster):
    create(cluster, "alike", "c1", "c2")
    create(cluster, "alike2")
    assert_same_answers(cluster, [("GET", path) for path in [
        "/ping", "/info", "/topics", "/channels?topic=alike", "/channels?topic=alike2", "/channels?topic=none",
        "/lookup?topic=alike", "/lookup?topic=alike2", "/nodes", "/debug"]])
    producers = httpx.get(cluster.lookupd_url("go") + "/lookup?topic=alike").json()["producers"]
    assert sorted(producer["tcp_port"] for producer in producers) == sorted(
        nsqd.tcp_port for nsqd in cluster.nsqds.values())


def test_errors_and_writes_are_answered_alike(cluster):
    assert_same_answers(cluster, [
        ("GET", "/lookup"), ("GET", "/lookup?topic=absent"), ("GET", "/lookup?topic=bad!name"), ("GET", "/channels"),
        ("GET", "/nosuch"), ("POST", "/topic/create"), ("POST", "/topic/create?topic=bad!name"),
        ("POST", "/topic/create?topic=written"), ("POST", "/channel/create?topic=written"),
        ("POST", "/channel/create?topic=written&channel=bad!name"),
        ("POST", "/channel/create?topic=written&channel=wc"), ("GET", "/lookup?topic=written"),
        ("GET", "/channels?topic=written"), ("POST", "/channel/delete?topic=written&channel=wc"),
        ("POST", "/channel/delete?topic=written&channel=wc"), ("GET", "/channels?topic=written"),
        ("POST", "/topic/delete?topic=written"), ("GET", "/lookup?topic=written"),
        ("POST", "/topic/tombstone?topic=absent"), ("POST", "/topic/tombstone?topic=absent&node=127.0.0.1:1"),
        ("GET", "/topic/create?topic=x"), ("PUT", "/lookup?topic=x"), ("OPTIONS", "/topic/create"),
        ("OPTIONS", "/lookup"), ("HEAD", "/ping"), ("DELETE", "/channel/delete"),
    ])


def test_a_tombstoned_producer_is_hidden_alike_until_its_lifetime_ends(cluster):
    create(cluster, "tomb", "c")
    go_nsqd = cluster.nsqds["go"]
    node = f"127.0.0.1:{go_nsqd.http_port}"
    assert_same_answers(cluster, [("POST", f"/topic/tombstone?topic=tomb&node={node}")])
    looked_up = both_answers(cluster, "GET", "/lookup?topic=tomb")
    assert looked_up["ours"] == looked_up["go"]
    assert [producer["tcp_port"] for producer in looked_up["go"][-1]["producers"]] == [cluster.nsqds["ours"].tcp_port]
    assert_same_answers(cluster, [("GET", "/nodes"), ("GET", "/channels?topic=tomb"), ("GET", "/topics")])
    nodes = {producer["tcp_port"]: producer for producer in both_answers(cluster, "GET", "/nodes")["go"][-1]["producers"]}
    assert nodes[go_nsqd.tcp_port]["tombstones"][nodes[go_nsqd.tcp_port]["topics"].index("tomb")] is True
    # --tombstone-lifetime=8s (room for the comparisons above on a loaded machine): both show the
    # producer again once it has passed
    wait_until(lambda: all(len(answer[-1]["producers"]) == 2
                           for answer in both_answers(cluster, "GET", "/lookup?topic=tomb").values()),
               timeout=30, what="the tombstone to expire on both lookupds")
    assert_same_answers(cluster, [("GET", "/lookup?topic=tomb"), ("GET", "/nodes")])


def test_a_topic_deleted_on_one_nsqd_is_unregistered_alike(cluster):
    create(cluster, "gone", "c")
    http(cluster.nsqds["go"].http_port, "/topic/delete?topic=gone", method="POST")
    http(cluster.nsqds["ours"].http_port, "/channel/delete?topic=gone&channel=c", method="POST")
    wait_until(lambda: all(len(answer[-1]["producers"]) == 1
                           for answer in both_answers(cluster, "GET", "/lookup?topic=gone").values()),
               what="the Go nsqd to unregister the topic")
    assert_same_answers(cluster, [("GET", "/lookup?topic=gone"), ("GET", "/channels?topic=gone"), ("GET", "/nodes"),
                                  ("GET", "/debug")])


def test_inactive_producers_are_hidden_alike(tmp_path):
    """A peer not heard from within --inactive-producer-timeout is left out of /lookup and /nodes;
    the same IDENTIFY and REGISTERs from a raw V1 peer (no PING) to each lookupd."""
    lookupds = {"go": GoLookupdProcess("--inactive-producer-timeout=1s"),
                "ours": LookupdProcess("--inactive-producer-timeout=1s")}
    try:
        async def register_and_wait():
            peers = []
            for lookupd in lookupds.values():
                peer = await Peer.connect(lookupd.tcp_port)
                await peer.identify(1)
                await peer.register("idle", "c")
                await peer.register("idle2")
                peers.append(peer)
            await trio.sleep(1.2)  # deliberate: past the 1 s --inactive-producer-timeout, with no PING
            return peers

        peers = trio.run(register_and_wait)
        answers = {}
        for kind, lookupd in lookupds.items():
            base = f"http://127.0.0.1:{lookupd.http_port}"
            answers[kind] = [(r.status_code, normal(r.json())) for r in (
                httpx.get(base + path, timeout=5) for path in
                ["/lookup?topic=idle", "/lookup?topic=idle2", "/nodes", "/topics", "/channels?topic=idle"])]
        trio.run(lambda: close_all(peers))
    finally:
        for lookupd in lookupds.values():
            lookupd.stop()
    assert answers["ours"] == answers["go"]
    assert answers["go"][0] == (200, {"channels": ["c"], "producers": []})
    assert answers["go"][2] == (200, {"producers": []})


async def close_all(peers: list[Peer]) -> None:
    for peer in peers:
        await peer.close()


# Consumers: each finds both nsqd through one lookupd and must get every message of both.

def publish_to_both(cluster: MixedCluster, topic: str) -> set[bytes]:
    """PER_NSQD messages on each nsqd (a topic without channels keeps them for its first one), once both
    lookupds know the topic on both."""
    bodies = set()
    for kind, nsqd in cluster.nsqds.items():
        mine = [f"{kind}-{i}".encode() for i in range(PER_NSQD)]
        publish(nsqd.http_port, topic, *mine)
        bodies.update(mine)
    wait_until(lambda: cluster.registered(topic), what=f"{topic} registered with both lookupds")
    return bodies


def consume_with_pynsq(cluster: MixedCluster, lookupd: str, topic: str, options: dict) -> collections.Counter:
    loop = TornadoLoop()
    received = collections.Counter()

    def handler(message):
        received[message.body] += 1
        return True

    try:
        loop.keep(nsq.Reader(topic=topic, channel="pynsq", lookupd_http_addresses=[cluster.lookupd_url(lookupd)],
                             message_handler=handler, max_in_flight=20, **options))
        loop.run_until(lambda: len(received) == 2 * PER_NSQD, timeout=20)
    finally:
        loop.close()
    return received


def consume_with_nsqjs(cluster: MixedCluster, lookupd: str, topic: str, features: dict) -> collections.Counter:
    config = {"lookupd": cluster.lookupd_url(lookupd), "topic": topic, "channel": "nsqjs", "count": 2 * PER_NSQD,
              "features": features}
    run = subprocess.run(["node", str(NSQJS / "consume.js"), json.dumps(config)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["nsqd"] == sorted(f"127.0.0.1:{nsqd.tcp_port}" for nsqd in cluster.nsqds.values())
    return collections.Counter(body.encode() for body in result["bodies"])


def consume_with_nsqclient(cluster: MixedCluster, lookupd: str, topic: str, options: dict) -> collections.Counter:
    received = collections.Counter()

    async def main():
        async def handler(message: Message) -> None:
            received[message.body] += 1

        async with Consumer(topic, "nsqclient", handler, lookupd_http_addresses=[cluster.lookupd_url(lookupd)],
                            max_in_flight=20, **options) as consumer:
            await await_until(lambda: len(received) >= 2 * PER_NSQD, 20, "every message of both nsqd")
            assert sorted(consumer.connections) == sorted(nsqd.tcp_address for nsqd in cluster.nsqds.values())

    anyio.run(main)
    return received


def consume_with_nsq_tail(cluster: MixedCluster, lookupd: str, topic: str, options: dict) -> collections.Counter:
    run = subprocess.run([go_program("nsq_tail"), f"--topic={topic}", f"--lookupd-http-address=127.0.0.1:"
                          f"{cluster.lookupds[lookupd].http_port}", f"-n={2 * PER_NSQD}", "--channel=nsq_tail"],
                         capture_output=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return collections.Counter(run.stdout.splitlines())


needs_node = pytest.mark.skipif(shutil.which("node") is None or not (NSQJS / "node_modules" / "nsqjs").exists(),
                                reason="needs Node.js and tests/nsqjs/node_modules (make test installs them)")
CONSUMERS = {
    "pynsq": (consume_with_pynsq, {}),
    "pynsq-deflate": (consume_with_pynsq, {"deflate": True, "deflate_level": 3}),
    "nsqjs": (consume_with_nsqjs, {}),
    "nsqjs-snappy": (consume_with_nsqjs, {"snappy": True}),
    "nsqclient": (consume_with_nsqclient, {}),
    "nsqclient-snappy": (consume_with_nsqclient, {"snappy": True}),
    "nsq_tail": (consume_with_nsq_tail, {}),
}


@pytest.mark.parametrize("lookupd", ["go", "ours"])
@pytest.mark.parametrize("consumer", [pytest.param(name, marks=[needs_node] if name.startswith("nsqjs") else [])
                                      for name in CONSUMERS])
def test_consumers_discover_both_nsqd_and_get_every_message(cluster, compressed_socket_shim, consumer, lookupd):
    topic = f"{consumer.replace('-', '_')}_via_{lookupd}"
    bodies = publish_to_both(cluster, topic)
    consume, options = CONSUMERS[consumer]
    received = consume(cluster, lookupd, topic, options)
    assert set(received) == bodies
    for nsqd in cluster.nsqds.values():
        channel = json.loads(http(nsqd.http_port, f"/stats?format=json&topic={topic}"))["topics"][0]["channels"][0]
        assert channel["message_count"] == PER_NSQD
