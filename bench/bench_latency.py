"""Publish-to-delivery latency at a steady rate: p50, p99, p99.9 and the worst.

    python bench/bench_latency.py [--runs=3] [--runfor=10s] [--rate=10000]

Each run starts a fresh nsqd with default flags. One consumer connection (its own
process) IDENTIFYs with output_buffer_size -1 (no output buffering: nsqd's default
buffers up to 16 KiB or 250 ms, which is that much latency by design), subscribes with
RDY 2500 and FINs what each receive brought, in one write. One publisher connection sends
each PUB when it falls due at --rate (those that fell due while it slept go in one write),
without waiting for the OKs (read as they come), each body starting with its send time
(the monotonic clock, shared by the processes). The first second (or half of a shorter run) is
warm-up and not counted.
"""

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import cpu_seconds, running_nsqd  # noqa: E402
from bench.report import figure  # noqa: E402
from common.commands import Pub, Rdy, Sub  # noqa: E402
from common.frames import FRAME_HEAD, FRAME_TYPE_MESSAGE  # noqa: E402

TOPIC = "latency_bench"
SIZE = 200
SHORTEST_SLEEP = 0.0001
WARM_UP = 1.0


def consume(address: str, runfor: float, ready, results) -> None:
    conn = BenchConnection(address, {"output_buffer_size": -1})
    conn.send(Sub(TOPIC, "ch").to_bytes() + Rdy(2500).to_bytes())
    conn.read_response()
    ready.set()
    latencies, unread = [], bytearray()
    end = time.monotonic() + runfor
    conn.sock.settimeout(0.5)
    while time.monotonic() < end:
        try:
            unread += conn.receive()
        except TimeoutError:
            continue
        now, pos, fins = time.monotonic_ns(), 0, []
        while len(unread) - pos >= 8:
            size, frame_type = FRAME_HEAD.unpack_from(unread, pos)
            if len(unread) < pos + 4 + size:
                break
            if frame_type == FRAME_TYPE_MESSAGE:
                latencies.append(now - int.from_bytes(unread[pos + 34:pos + 42], "big"))
                fins.append(b"FIN " + bytes(unread[pos + 18:pos + 34]) + b"\n")
            pos += 4 + size
        del unread[:pos]
        if fins:
            conn.send(b"".join(fins))
    conn.close()
    results.put(latencies)


def publish(address: str, rate: float, runfor: float) -> int:
    conn = BenchConnection(address)
    conn.sock.setblocking(False)
    padding = b"p" * (SIZE - 8)
    start = time.monotonic()
    sent = 0
    while (now := time.monotonic()) < start + runfor:
        due = int((now - start) * rate) - sent
        if due > 0:
            stamp = time.monotonic_ns().to_bytes(8, "big")
            conn.sock.sendall(Pub(TOPIC, stamp + padding).to_bytes() * due)
            sent += due
        try:
            while conn.sock.recv(65536):
                pass
        except BlockingIOError:
            pass
        time.sleep(max(start + (sent + 1) / rate - time.monotonic(), SHORTEST_SLEEP))
    conn.close()
    return sent


def percentile(ordered: list[int], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] / 1e6


def measure(pid: int, address: str, rate: float, runfor: float) -> tuple[dict, float]:
    """Latency figures (ms) against the nsqd at ``address``, and its (``pid``'s) CPU-us per message."""
    ready, results = multiprocessing.Event(), multiprocessing.Queue()
    consumer = multiprocessing.Process(target=consume, args=(address, runfor + 1.0, ready, results))
    consumer.start()
    ready.wait()
    before = cpu_seconds(pid)
    sent = publish(address, rate, runfor)
    latencies = results.get()
    consumer.join()
    cpu = cpu_seconds(pid) - before
    ordered = sorted(latencies[int(rate * min(WARM_UP, runfor / 2)):])
    stats = {"p50": percentile(ordered, 0.5), "p99": percentile(ordered, 0.99),
             "p99.9": percentile(ordered, 0.999), "max": ordered[-1] / 1e6, "received": len(latencies),
             "sent": sent}
    return stats, cpu * 1e6 / sent


def one_run(rate: float, runfor: float) -> tuple[dict, float]:
    with running_nsqd() as (proc, address, _):
        return measure(proc.pid, address, rate, runfor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runfor", type=float, default=10.0, help="seconds of publishing")
    parser.add_argument("--rate", type=float, default=10_000.0, help="messages per second")
    args = parser.parse_args()
    runs = [one_run(args.rate, args.runfor) for _ in range(args.runs)]
    for stats, _ in runs:
        if stats["received"] != stats["sent"]:
            print(f"warning: {stats['sent']} published, {stats['received']} received", file=sys.stderr)
    medians = {key: statistics.median(stats[key] for stats, _ in runs) for key in ("p50", "p99", "p99.9", "max")}
    print(figure(f"latency at {args.rate:,.0f} msgs/s, p99", "us", [stats["p99"] * 1000 for stats, _ in runs],
                 [cpu for _, cpu in runs],
                 "; medians: " + ", ".join(f"{key} {value:.3f} ms" for key, value in medians.items())), flush=True)


if __name__ == "__main__":
    main()
