"""A fake NSQ cluster for nsqadmin's benchmark: one nsqlookupd and N nsqd that only answer questions.

    python bench/fake_stats_cluster.py [--nodes=20] [--topics=200] [--channels=5] [--clients=10] [--variants=1]
                                       [--live]

Every daemon listens on 127.0.0.1 (ephemeral ports) in this one trio process, served by
the project's HTTP server (serving/http.py). nsqd answer ``/info`` and
``/stats?format=json`` with NSQ v1.3's keys, honouring ``topic=``, ``channel=`` and
``include_clients=false`` as nsqd does; the lookupd answers ``/nodes``, ``/topics``,
``/lookup`` and ``/channels``. Answers are rendered once per distinct question and kept,
so the fake side costs a dictionary lookup. With --variants=N an nsqd's ``/stats``
cycles through N renderings whose counts, depths and latencies differ, as a live
cluster's do from one poll to the next. With --live every ``/stats`` is rendered anew, its
counters a step further than at the last one, as a cluster's that never restarts (the stats
history's benchmarks). Prints one JSON line with the ports, then serves until killed.
"""

import argparse
import functools
import json
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from serving.http import HTTPServer, Response  # noqa: E402
from serving.v1 import parse_query  # noqa: E402

JSON = [("Content-Type", "application/json"), ("X-NSQ-Content-Type", "nsq; version=1.0")]
NOT_FOUND = Response(404, b'{"message":"NOT_FOUND"}', JSON)
CONNECT_TS = 1_700_000_000


def client(node: int, topic: int, channel: int, n: int) -> dict:
    return {"client_id": f"worker-{topic}-{channel}-{n}", "hostname": f"consumer-{n}.example", "version": "V2",
            "remote_address": f"10.1.{node}.{n}:{40000 + topic}", "state": 3, "ready_count": 100,
            "in_flight_count": 7, "message_count": 123_456, "finish_count": 123_400, "requeue_count": 49,
            "connect_ts": CONNECT_TS, "sample_rate": 0, "deflate": False, "snappy": n % 2 == 0,
            "user_agent": "go-nsq/1.1.0", "tls": n % 3 == 0, "tls_cipher_suite": "TLS_AES_128_GCM_SHA256",
            "tls_version": "TLS1.3", "tls_negotiated_protocol": "", "tls_negotiated_protocol_is_mutual": False}


def e2e(count: int, latency: int) -> dict:
    return {"count": count, "percentiles": [{"quantile": 0.99, "value": 2_500_000 + latency},
                                            {"quantile": 0.95, "value": 900_000 + latency}]}


class FakeNsqd:
    def __init__(self, node: int, topics: int, channels: int, clients: int, variants: int, live: bool = False):
        self.node, self.topics, self.channels, self.clients = node, topics, channels, clients
        self.variants, self.asked, self.live = variants, 0, live
        self.http_port = 0

    def channel(self, topic: int, channel: int, with_clients: bool, variant: int) -> dict:
        messages = 1_000_000 + 10_000 * self.node + 100 * topic + 997 * variant
        return {"channel_name": f"channel-{channel}", "depth": 100 * channel + topic + 37 * variant,
                "backend_depth": topic, "in_flight_count": 7 * self.clients, "deferred_count": channel,
                "message_count": messages, "requeue_count": 49 + variant, "timeout_count": 3 + variant,
                "client_count": self.clients,
                "clients": [client(self.node, topic, channel, n) for n in range(self.clients)] if with_clients else None,
                "paused": False,
                "e2e_processing_latency": e2e(messages, 1000 * self.node + 10 * channel + topic + variant)}

    def topic(self, topic: int, channel_name: str, with_clients: bool, variant: int) -> dict:
        channels = [self.channel(topic, c, with_clients, variant) for c in range(self.channels)
                    if not channel_name or channel_name == f"channel-{c}"]
        messages = 1_000_000 + 10_000 * self.node + 100 * topic + 997 * variant
        return {"topic_name": f"topic-{topic:03d}", "channels": channels, "depth": (topic + variant) % 7,
                "backend_depth": 0, "message_count": messages, "message_bytes": 200 * messages, "paused": False,
                "e2e_processing_latency": e2e(messages, 1000 * self.node + topic + variant)}

    @functools.cache
    def stats(self, topic_name: str, channel_name: str, with_clients: bool, variant: int) -> bytes:
        topics = [self.topic(t, channel_name, with_clients, variant) for t in range(self.topics)
                  if not topic_name or topic_name == f"topic-{t:03d}"]
        return json.dumps({"version": "1.3.0", "health": "OK", "start_time": CONNECT_TS, "topics": topics,
                           "producers": None}, separators=(",", ":")).encode()

    @functools.cached_property
    def info(self) -> bytes:
        return json.dumps({"version": "1.3.0", "broadcast_address": "127.0.0.1", "hostname": f"fake-nsqd-{self.node:02d}",
                           "http_port": self.http_port, "tcp_port": 4150 + self.node, "start_time": CONNECT_TS}).encode()

    async def handle(self, request) -> Response:
        if request.path == "/info":
            return Response(200, self.info, JSON)
        if request.path != "/stats":
            return NOT_FOUND
        query = parse_query(request.query)
        first = lambda name: query.get(name, [""])[0]  # noqa: E731
        self.asked += 1
        question = (first("topic"), first("channel"), first("include_clients") != "false")
        if self.live:
            return Response(200, FakeNsqd.stats.__wrapped__(self, *question, self.asked), JSON)
        return Response(200, self.stats(*question, self.asked % self.variants), JSON)


class FakeLookupd:
    def __init__(self, nsqds: list[FakeNsqd], topics: int, channels: int):
        self.nsqds, self.topics, self.channels = nsqds, topics, channels

    def peer(self, nsqd: FakeNsqd) -> dict:
        return {"remote_address": f"127.0.0.1:{50000 + nsqd.node}", "hostname": f"fake-nsqd-{nsqd.node:02d}",
                "broadcast_address": "127.0.0.1", "tcp_port": 4150 + nsqd.node, "http_port": nsqd.http_port, "version": "1.3.0"}

    @functools.cached_property
    def nodes(self) -> bytes:
        names = [f"topic-{t:03d}" for t in range(self.topics)]
        return json.dumps({"producers": [{**self.peer(n), "tombstones": [False] * len(names), "topics": names}
                                         for n in self.nsqds]}).encode()

    @functools.cache
    def lookup(self, topic: str) -> bytes:
        channels = [f"channel-{c}" for c in range(self.channels)]
        return json.dumps({"channels": channels, "producers": [self.peer(n) for n in self.nsqds]}).encode()

    async def handle(self, request) -> Response:
        if request.path == "/nodes":
            return Response(200, self.nodes, JSON)
        if request.path == "/topics":
            return Response(200, json.dumps({"topics": [f"topic-{t:03d}" for t in range(self.topics)]}).encode(), JSON)
        if request.path in ("/lookup", "/channels"):
            return Response(200, self.lookup(parse_query(request.query)["topic"][0]), JSON)
        return NOT_FOUND


async def serve(handler, nursery) -> int:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(HTTPServer(handler, max_body_size=1024).serve, listeners)
    return listeners[0].socket.getsockname()[1]


async def main(args) -> None:
    nsqds = [FakeNsqd(node, args.topics, args.channels, args.clients, args.variants, args.live)
             for node in range(args.nodes)]
    async with trio.open_nursery() as nursery:
        for nsqd in nsqds:
            nsqd.http_port = await serve(nsqd.handle, nursery)
        lookupd_port = await serve(FakeLookupd(nsqds, args.topics, args.channels).handle, nursery)
        print(json.dumps({"lookupd": lookupd_port, "nsqd": [n.http_port for n in nsqds]}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--channels", type=int, default=5)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--variants", type=int, default=1)
    parser.add_argument("--live", action="store_true", help="render every /stats anew, counters moving on")
    trio.run(main, parser.parse_args())
