"""nsqlookupd under discovery load: GET /lookup against a populated registration DB.

    python bench/bench_lookupd.py [--runs=3] [--runfor=10s] [--clients=4] [--peers=100] [--registrations=10000]

Each run starts a fresh nsqlookupd process, connects ``--peers`` V1 peers that speak
like nsqd (magic, IDENTIFY, then REGISTER <topic> <channel>) and keep their
connections open, spreading ``--registrations`` REGISTERs over them (each topic has
5 channels and lives on ~4 peers, so one /lookup answers ~4 producers). Then
``--clients`` processes each send ``GET /lookup?topic=<random topic>`` over one
keep-alive connection, one request at a time, for ``--runfor``.

Prints requests/s, p50/p99 latency and the nsqlookupd process's CPU seconds during
the measurement, per run and as medians.
"""

import argparse
import json
import multiprocessing
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workers import read_http_response  # noqa: E402
from common.goflags import parse_duration  # noqa: E402
from common.protocol_v1 import MAGIC_V1, Identify, Register, ResponseReader, is_error  # noqa: E402

CHANNELS_PER_TOPIC = 5
TOPICS_PER_PEER_STEP = 5  # peer i's topics start at i * 5: each topic lands on ~4 peers
WARMUP = 0.5


def start_lookupd(*args: str) -> tuple[subprocess.Popen, int, int]:
    proc = subprocess.Popen([sys.executable, "-m", "nsqlookupd", "--tcp-address=127.0.0.1:0",
                             "--http-address=127.0.0.1:0", *args], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    ports = {}
    for line in proc.stderr:
        match = re.search(r"(TCP|HTTP): listening on 127\.0\.0\.1:(\d+)", line)
        if match:
            ports[match.group(1)] = int(match.group(2))
        if len(ports) == 2:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, ports["TCP"], ports["HTTP"]
    raise RuntimeError("nsqlookupd did not start")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 10 ms


def peer_topics(index: int, per_peer: int) -> list[str]:
    topics = per_peer // CHANNELS_PER_TOPIC
    return [f"topic_{index * TOPICS_PER_PEER_STEP + k}" for k in range(topics)]


def connect_peers(tcp_port: int, peers: int, registrations: int) -> tuple[list[socket.socket], set[str]]:
    """Open the peers, IDENTIFY and REGISTER each; return the open sockets and all topics."""
    per_peer = registrations // peers
    socks, all_topics = [], set()
    for index in range(peers):
        sock = socket.create_connection(("127.0.0.1", tcp_port))
        info = {"broadcast_address": f"nsqd-{index}.bench", "hostname": f"nsqd-{index}", "tcp_port": 4150,
                "http_port": 4151, "version": "1.3.0"}
        commands = [MAGIC_V1, Identify(info).to_bytes()]
        count = 0
        for topic in peer_topics(index, per_peer):
            all_topics.add(topic)
            for channel in range(CHANNELS_PER_TOPIC):
                commands.append(Register(topic, f"channel_{channel}").to_bytes())
                count += 1
        sock.sendall(b"".join(commands))
        reader, replies = ResponseReader(), 0
        while replies < count + 1:
            reader.receive_data(sock.recv(65536))
            while (reply := reader.next_response()) is not None:
                if is_error(reply):
                    raise RuntimeError(reply.decode())
                replies += 1
        socks.append(sock)
    return socks, all_topics


def client(http_port: int, topics: list[str], start: float, deadline: float, seed: int, result) -> None:
    rng = random.Random(seed)
    sock = socket.create_connection(("127.0.0.1", http_port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    requests = [f"GET /lookup?topic={topic} HTTP/1.1\r\nHost: 127.0.0.1:{http_port}\r\n\r\n".encode()
                for topic in topics]
    buf = bytearray()
    sock.sendall(requests[0])
    body, buf = read_http_response(sock, buf)
    answer = json.loads(body)
    assert answer["producers"] and len(answer["channels"]) == CHANNELS_PER_TOPIC, answer
    latencies = []
    while (now := time.monotonic()) < deadline:
        sock.sendall(rng.choice(requests))
        _, buf = read_http_response(sock, buf)
        if now >= start:
            latencies.append(time.monotonic() - now)
    sock.close()
    result.put(latencies)


def run_once(args) -> tuple[float, float, float, float]:
    proc, tcp_port, http_port = start_lookupd(*args.lookupd_flag)
    try:
        peers, topics = connect_peers(tcp_port, args.peers, args.registrations)
        topics = sorted(topics)
        result = multiprocessing.Queue()
        start = time.monotonic() + WARMUP
        deadline = start + parse_duration(args.runfor)
        workers = [multiprocessing.Process(target=client, args=(http_port, topics, start, deadline, seed, result))
                   for seed in range(args.clients)]
        for worker in workers:
            worker.start()
        while time.monotonic() < start:
            time.sleep(0.01)
        cpu_before = cpu_seconds(proc.pid)
        latencies = [latency for _ in workers for latency in result.get()]
        cpu = cpu_seconds(proc.pid) - cpu_before
        elapsed = deadline - start
        for worker in workers:
            worker.join()
        for sock in peers:
            sock.close()
    finally:
        proc.terminate()
        proc.wait()
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    return len(latencies) / elapsed, p50, p99, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runfor", default="10s")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--peers", type=int, default=100)
    parser.add_argument("--registrations", type=int, default=10_000)
    parser.add_argument("--lookupd-flag", action="append", default=[],
                        help="extra nsqlookupd flag, e.g. --lookupd-flag=--log-level=warn (repeatable)")
    args = parser.parse_args()
    results = []
    for run in range(args.runs):
        rate, p50, p99, cpu = run_once(args)
        results.append((rate, p50, p99, cpu))
        print(f"run {run + 1}: {rate:,.0f} req/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
              f"nsqlookupd CPU {cpu:.1f} s ({rate * parse_duration(args.runfor) / max(cpu, 0.01):,.0f} req per CPU-s)",
              flush=True)
    rate, p50, p99, cpu = (statistics.median(column) for column in zip(*results))
    print(f"lookup: median {rate:,.0f} req/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms, nsqlookupd CPU {cpu:.1f} s "
          f"over {args.runs} runs of {args.runfor} ({args.clients} clients, {args.peers} peers, "
          f"{args.registrations:,} registrations)", flush=True)


if __name__ == "__main__":
    main()
