"""RSS of nsqd holding N queued 200-byte messages in one channel.

    python bench/bench_memory.py --messages=1000000

Starts its own nsqd on a free loopback port with --mem-queue-size above N (so every
message stays in memory), subscribes one consumer with RDY 0 (so the channel exists and
nothing is delivered), publishes N messages with MPUB, then reads nsqd's VmRSS from /proc.
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import rss_kib, start_nsqd  # noqa: E402
from common.commands import Mpub, Sub  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args()
    proc, address, _ = start_nsqd(f"--mem-queue-size={args.messages}")
    try:
        consumer = BenchConnection(address)
        consumer.sock.sendall(Sub("mem_bench", "ch").to_bytes())
        consumer.read_response()
        baseline = rss_kib(proc.pid)
        producer = BenchConnection(address)
        batch = Mpub("mem_bench", [b"m" * args.size] * args.batch_size).to_bytes()
        for _ in range(args.messages // args.batch_size):
            producer.sock.sendall(batch)
            producer.read_response()
        time.sleep(0.5)
        rss = rss_kib(proc.pid)
        queued = args.messages // args.batch_size * args.batch_size
        print(f"queued: {queued} x {args.size}B - rss: {rss / 1024:.1f}MiB (baseline {baseline / 1024:.1f}MiB) - "
              f"{(rss - baseline) * 1024 / queued:.0f} bytes/message over baseline")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
