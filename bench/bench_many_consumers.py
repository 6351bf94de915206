"""PUB latency while nsqd serves thousands of connected consumers with heartbeats.

    python bench/bench_many_consumers.py --consumers=5000 --heartbeat-interval=1s --rate=2000 --runfor=30s

Starts its own nsqd, connects --consumers consumers (asyncio, in --processes worker
processes) spread over --topics topics (one channel each), every one IDENTIFYing with
--heartbeat-interval, answering heartbeats with NOP, RDY 1 and FINning each message. Once
all are subscribed, one publisher sends PUBs of 200 bytes, one at a time, at a steady
--rate over the topics in turn, and times each from its write to nsqd's OK. Prints the
PUB latency percentiles, the messages the consumers finished, the heartbeats they
answered, and nsqd's CPU.
"""

import argparse
import asyncio
import gc
import multiprocessing
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.nsqd_process import cpu_seconds, running_nsqd  # noqa: E402
from common.client_v2 import FrameParser  # noqa: E402
from common.commands import MAGIC_V2, Fin, Identify, Nop, Pub, Rdy, Sub  # noqa: E402
from common.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, HEARTBEAT  # noqa: E402
from common.goflags import parse_duration  # noqa: E402

NOP = Nop().to_bytes()


class Consumer(asyncio.Protocol):
    """One subscribed connection: NOP for each heartbeat, FIN for each message."""

    def __init__(self, topic: str, heartbeat_ms: int, subscribed: asyncio.Future, counts: dict):
        self.topic, self.heartbeat_ms, self.subscribed, self.counts = topic, heartbeat_ms, subscribed, counts
        self.parser = FrameParser()
        self.answers_expected = 2  # IDENTIFY's OK, SUB's OK
        self.closed_here = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(MAGIC_V2 + Identify({"heartbeat_interval": self.heartbeat_ms}).to_bytes()
                        + Sub(self.topic, "ch").to_bytes() + Rdy(1).to_bytes())

    def data_received(self, data: bytes) -> None:
        self.parser.receive_data(data)
        out = []
        for frame_type, frame in self.parser.frames():
            if frame_type == FRAME_TYPE_MESSAGE:
                out.append(Fin(frame[10:26]).to_bytes())
                self.counts["finished"] += 1
            elif frame_type == FRAME_TYPE_ERROR:
                raise RuntimeError(frame.decode())
            elif frame == HEARTBEAT:
                out.append(NOP)
                self.counts["heartbeats"] += 1
            else:
                self.answers_expected -= 1
                if self.answers_expected == 0:
                    self.subscribed.set_result(None)
        if out:
            self.transport.write(b"".join(out))

    def connection_lost(self, exc) -> None:
        if not self.closed_here:
            self.counts["lost"] += 1

    def close(self) -> None:
        self.closed_here = True
        self.transport.close()


async def consume(address: str, topics: list[str], count: int, heartbeat_ms: int, ready, stop) -> dict:
    loop = asyncio.get_running_loop()
    host, _, port = address.rpartition(":")
    counts = {"finished": 0, "heartbeats": 0, "lost": 0}
    consumers = []
    for index in range(count):
        subscribed = loop.create_future()
        _, consumer = await loop.create_connection(
            lambda: Consumer(topics[index % len(topics)], heartbeat_ms, subscribed, counts), host, int(port))
        consumers.append(consumer)
        await subscribed
    ready.set()
    await loop.run_in_executor(None, stop.wait)
    for consumer in consumers:
        consumer.close()
    return counts


def consumer_process(address, topics, count, heartbeat_ms, ready, stop, results) -> None:
    # a load generator must not stall: full collections of its thousands of connections
    # would make it miss heartbeats and be dropped, which would be blamed on nsqd
    gc.set_threshold(50_000, 20, 100)
    results.put(asyncio.run(consume(address, topics, count, heartbeat_ms, ready, stop)))


def publish_steadily(address: str, topics: list[str], rate: float, runfor: float) -> list[float]:
    """PUB at ``rate`` per second for ``runfor`` seconds; each PUB's latency to its OK, in seconds."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(MAGIC_V2)
    commands = [Pub(topic, b"p" * 200).to_bytes() for topic in topics]
    parser = FrameParser()
    latencies = []
    start = time.monotonic()
    for sent in range(int(rate * runfor)):
        due = start + sent / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        began = time.perf_counter()
        sock.sendall(commands[sent % len(commands)])
        while (frame := parser.next_frame()) is None or frame[1] == HEARTBEAT:
            if frame is None:
                parser.receive_data(sock.recv(65536))
            else:
                sock.sendall(NOP)
        latencies.append(time.perf_counter() - began)
        if frame[0] == FRAME_TYPE_ERROR:
            raise RuntimeError(frame[1].decode())
    sock.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--consumers", type=int, default=5000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--heartbeat-interval", default="1s")
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--runfor", default="30s")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    topics = [f"many{index}" for index in range(args.topics)]
    heartbeat_ms = round(parse_duration(args.heartbeat_interval) * 1000)
    stop, results = multiprocessing.Event(), multiprocessing.Queue()
    with running_nsqd() as (proc, address, _):
        try:
            started = time.monotonic()
            workers = start_consumers(address, topics, args.consumers, args.processes, heartbeat_ms, stop, results)
            print(f"{args.consumers} consumers subscribed in {time.monotonic() - started:.1f}s", flush=True)
            cpu_before, began = cpu_seconds(proc.pid), time.monotonic()
            latencies = publish_steadily(address, topics, args.rate, parse_duration(args.runfor))
            cpu, elapsed = cpu_seconds(proc.pid) - cpu_before, time.monotonic() - began
            time.sleep(1)  # the last FINs
        finally:
            stop.set()
        counts = [results.get() for _ in workers]
        for worker in workers:
            worker.join()
    latencies.sort()
    ms = [latencies[int(q * (len(latencies) - 1))] * 1000 for q in (0.5, 0.99, 0.999)]
    print(f"PUB latency over {len(latencies)} publishes at {args.rate:.0f}/s: p50 {ms[0]:.2f}ms p99 {ms[1]:.2f}ms "
          f"p99.9 {ms[2]:.2f}ms max {latencies[-1] * 1000:.2f}ms mean {statistics.mean(latencies) * 1000:.2f}ms - "
          f"finished {sum(c['finished'] for c in counts)}, heartbeats answered "
          f"{sum(c['heartbeats'] for c in counts)}, connections lost {sum(c['lost'] for c in counts)} - "
          f"in {elapsed:.1f}s nsqd cpu {cpu:.1f}s ({cpu / elapsed * 100:.0f}% of a core)")


def start_consumers(address: str, topics: list[str], consumers: int, processes: int, heartbeat_ms: int,
                    stop, results) -> list[multiprocessing.Process]:
    """The consumer processes, each returned once all its consumers are subscribed."""
    workers = []
    for index in range(processes):
        share = consumers // processes + (index < consumers % processes)
        subscribed = multiprocessing.Event()
        workers.append(multiprocessing.Process(target=consumer_process, args=(
            address, topics, share, heartbeat_ms, subscribed, stop, results)))
        workers[-1].start()
        while not subscribed.wait(1):
            if not workers[-1].is_alive():
                raise RuntimeError("a consumer process died")
    return workers


if __name__ == "__main__":
    main()
