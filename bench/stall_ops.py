"""The operations bench/bench_stalls.py runs beside its steady publisher: each one's data
directory, flags, set-up (not measured) and the operation itself (measured).

An operation gets a fresh nsqd (Go's or ours) started with ``flags`` in a data directory that
``prepare`` filled first: nsqd.dat naming 10,000 topics x 2 channels, or a topic's disk queue
of 1 GB written in go-diskqueue's format, is written straight to the files (both daemons load
them at start) rather than made through the API, which would take minutes.
"""

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable

import trustme

from bench.nsq_socket import BenchConnection
from common.commands import Mpub, Pub

SIZE = 200  # bytes of each message body
MPUB_BATCH = 1000
DISK_RECORD_BODY = 100_000  # a 1 GB backlog as 100 KB messages: 10 files of 100 MiB
MAX_BYTES_PER_FILE = 100 * 1024 * 1024
MESSAGE_HEAD = 26  # timestamp, attempts, id: what nsqd writes before a body


@dataclass
class Daemon:
    """A started nsqd as an operation sees it."""

    name: str  # Go or ours
    tcp_address: str
    http_address: str

    def http(self, method: str, path: str, body: bytes | None = None, timeout: float = 120.0) -> bytes:
        request = urllib.request.Request(f"http://{self.http_address}{path}", data=body, method=method)
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.read()


@dataclass
class Operation:
    key: str
    title: str
    act: Callable[[Daemon], None]
    prepare: Callable[[str], None] = lambda data_path: None
    setup: Callable[[Daemon], None] = lambda daemon: None
    flags: tuple[str, ...] = ()
    go: bool = True  # False: ours only (Go's nsqd has no such thing)


def free_memory(daemon: Daemon) -> None:
    """POST /debug/freememory: NSQ's nsqd collects, then answers 500 (README, Deliberate differences)."""
    try:
        daemon.http("POST", "/debug/freememory")
    except urllib.error.HTTPError as exc:
        if daemon.name != "Go" or exc.code != 500:
            raise


def write_metadata(data_path: str, topics: int, channels: int) -> None:
    """nsqd.dat naming ``topics`` topics of ``channels`` channels each, as NSQ writes it."""
    document = {"topics": [{"name": f"idle_{number:05d}", "paused": False,
                            "channels": [{"name": f"ch{index}", "paused": False} for index in range(channels)] or None}
                           for number in range(topics)] or None, "version": "1.3.0"}
    with open(os.path.join(data_path, "nsqd.dat"), "w") as handle:
        json.dump(document, handle, separators=(",", ":"))


def write_disk_backlog(data_path: str, topic: str, total_bytes: int) -> None:
    """A topic with ``total_bytes`` of messages in its go-diskqueue files, and nsqd.dat naming it."""
    record = (MESSAGE_HEAD + DISK_RECORD_BODY).to_bytes(4, "big") + bytes(MESSAGE_HEAD + DISK_RECORD_BODY)
    per_file = max(1, MAX_BYTES_PER_FILE // len(record))
    records = max(1, total_bytes // len(record))
    number = 0
    for number, start in enumerate(range(0, records, per_file)):
        count = min(per_file, records - start)
        with open(os.path.join(data_path, f"{topic}.diskqueue.{number:06d}.dat"), "wb") as handle:
            for _ in range(count):
                handle.write(record)
        last_size = count * len(record)
    with open(os.path.join(data_path, f"{topic}.diskqueue.meta.dat"), "w") as handle:
        handle.write(f"{records}\n0,0\n{number},{last_size}\n")
    with open(os.path.join(data_path, "nsqd.dat"), "w") as handle:
        json.dump({"topics": [{"name": topic, "paused": False, "channels": None}], "version": "1.3.0"}, handle,
                  separators=(",", ":"))


def publish_backlog(daemon: Daemon, topic: str, channel: str, count: int) -> None:
    """``count`` messages queued in ``channel`` (in memory, with a --mem-queue-size above it)."""
    daemon.http("POST", f"/topic/create?topic={topic}")
    daemon.http("POST", f"/channel/create?topic={topic}&channel={channel}")
    conn = BenchConnection(daemon.tcp_address)
    body = b"m" * SIZE
    for start in range(0, count, MPUB_BATCH):
        conn.send(Mpub(topic, [body] * min(MPUB_BATCH, count - start)).to_bytes())
        conn.read_response()
    conn.close()
    deadline = time.monotonic() + 120
    while channel_depth(daemon, topic, channel) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{daemon.name}: the channel did not reach {count} messages")
        time.sleep(0.2)


def channel_depth(daemon: Daemon, topic: str, channel: str) -> int:
    document = json.loads(daemon.http("GET", f"/stats?format=json&topic={topic}&channel={channel}"))
    document = document.get("data", document)  # NSQ v1.3 answers without the V0 envelope
    return document["topics"][0]["channels"][0]["depth"]


def create_topics(count: int, interval: float) -> Callable[[Daemon], None]:
    def act(daemon: Daemon) -> None:
        conn = BenchConnection(daemon.tcp_address)
        start = time.monotonic()
        for number in range(count):
            time.sleep(max(0.0, start + number * interval - time.monotonic()))
            conn.send(Pub(f"new_{number:04d}", b"n" * SIZE).to_bytes())
            conn.read_response()
        conn.close()
    return act


def read_every(path: str, reads: int, interval: float) -> Callable[[Daemon], None]:
    def act(daemon: Daemon) -> None:
        start = time.monotonic()
        for number in range(reads):
            time.sleep(max(0.0, start + number * interval - time.monotonic()))
            daemon.http("GET", path)
    return act


def rewrite_metadata(times: int, interval: float) -> Callable[[Daemon], None]:
    """nsqd.dat rewritten ``times`` times: a new topic, then a channel paused (or unpaused), each time."""
    def act(daemon: Daemon) -> None:
        conn = BenchConnection(daemon.tcp_address)
        start = time.monotonic()
        for number in range(times):
            time.sleep(max(0.0, start + number * interval - time.monotonic()))
            conn.send(Pub(f"meta_{number:04d}", b"n" * SIZE).to_bytes())
            conn.read_response()
            verb = "unpause" if number % 2 else "pause"
            daemon.http("POST", f"/channel/{verb}?topic=idle_00000&channel=ch0")
        conn.close()
    return act


def connect_tls_clients(count: int, certificates: list) -> Callable[[Daemon], None]:
    def act(daemon: Daemon) -> None:
        context = ssl.create_default_context()
        certificates[0].configure_trust(context)
        barrier = threading.Barrier(count)
        connections, errors = [], []

        def connect() -> None:
            barrier.wait()
            try:
                connections.append(BenchConnection(daemon.tcp_address, {"feature_negotiation": True, "tls_v1": True},
                                                   context))
            except Exception as exc:  # noqa: BLE001 - counted and reported below
                errors.append(exc)

        threads = [threading.Thread(target=connect) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for conn in connections:
            conn.close()
        if errors:
            raise RuntimeError(f"{daemon.name}: {len(errors)} TLS clients failed: {errors[0]!r}")
    return act


def tls_flags(directory: str, certificates: list) -> tuple[str, ...]:
    """A CA (kept in ``certificates`` for the clients) and nsqd's certificate files in ``directory``."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = os.path.join(directory, "server.pem"), os.path.join(directory, "server.key")
    server.cert_chain_pems[0].write_to_path(cert_file)
    server.private_key_pem.write_to_path(key_file)
    certificates.append(ca)
    return f"--tls-cert={cert_file}", f"--tls-key={key_file}"


def operations(args, cert_dir: str) -> list[Operation]:
    """Every operation, sized by the command line's flags."""
    idle = lambda data_path: write_metadata(data_path, args.idle_topics, args.idle_channels)  # noqa: E731
    idle_size = f"{args.idle_topics:,} topics x {args.idle_channels} channels"
    certificates: list = []
    return [
        Operation("idle", "nothing: the steady publisher alone (the floor of every row)", lambda daemon: None),
        Operation("create", f"create {args.new_topics} topics {args.new_topic_interval * 1000:g} ms apart",
                  create_topics(args.new_topics, args.new_topic_interval)),
        Operation("stats", f"/stats every {args.stats_interval:g} s, {idle_size}",
                  read_every("/stats", args.stats_reads, args.stats_interval), prepare=idle),
        Operation("stats_json", f"/stats?format=json every {args.stats_interval:g} s, {idle_size}",
                  read_every("/stats?format=json", args.stats_reads, args.stats_interval), prepare=idle),
        Operation("metrics", f"/metrics every {args.stats_interval:g} s, {idle_size} (ours only)",
                  read_every("/metrics", args.stats_reads, args.stats_interval), prepare=idle, go=False),
        Operation("nsqd_dat", f"nsqd.dat rewritten {args.metadata_writes} times, {idle_size}",
                  rewrite_metadata(args.metadata_writes, args.stats_interval), prepare=idle),
        Operation("delete", f"delete a topic with {args.delete_mb:,} MB on disk",
                  lambda daemon: daemon.http("POST", "/topic/delete?topic=big"),
                  prepare=lambda data_path: write_disk_backlog(data_path, "big", args.delete_mb * 1024 * 1024)),
        Operation("empty", f"empty a channel of {args.empty_messages:,} in-memory messages",
                  lambda daemon: daemon.http("POST", "/channel/empty?topic=full&channel=c"),
                  setup=lambda daemon: publish_backlog(daemon, "full", "c", args.empty_messages),
                  flags=(f"--mem-queue-size={args.empty_messages + MPUB_BATCH}",)),
        Operation("tls", f"{args.tls_clients} TLS clients connecting at once",
                  connect_tls_clients(args.tls_clients, certificates), flags=tls_flags(cert_dir, certificates)),
        Operation("gc", f"full GC (POST /debug/freememory), {args.gc_messages:,} messages queued",
                  free_memory,
                  setup=lambda daemon: publish_backlog(daemon, "held", "c", args.gc_messages),
                  flags=(f"--mem-queue-size={args.gc_messages + MPUB_BATCH}",)),
    ]
