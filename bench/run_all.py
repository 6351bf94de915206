"""Run every nsqd benchmark against a fresh nsqd each time and print medians.

    python bench/run_all.py [--runs=3] [--runfor=10s]

publish:       bench_writer with 2 connections, MPUB batches of 200 x 200-byte messages.
e2e:           bench_reader (SUB, RDY 2500, FIN each) running while bench_writer (1 connection)
               publishes; the rate is what the reader consumed per second.
... disk:      the same two with --mem-queue-size=0, so every message goes through the disk queue.
http pub:      POST /pub, one message per request, 4 keep-alive connections.
memory:        RSS with 1,000,000 queued 200-byte messages in one channel.
restart:       first delivery after restarting an nsqd with 1,000,000 messages on disk.
Also prints nsqd's CPU seconds per run, since this machine is shared and noisy.
"""

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.nsqd_process import cpu_seconds, free_port, start_nsqd  # noqa: E402
from common.goflags import parse_duration  # noqa: E402


def script(name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "bench" / name), *args], stdout=subprocess.PIPE, text=True)


def rate(output: str) -> float:
    return float(re.search(r"([\d.]+)ops/s", output).group(1))


def run_publish(runfor: str, *flags: str) -> tuple[float, float]:
    proc, address = start_nsqd(*flags)
    try:
        out = script("bench_writer.py", f"--nsqd-tcp-address={address}", f"--runfor={runfor}",
                     "--connections=2").communicate()[0]
        return rate(out), cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait()


def run_e2e(runfor: str, *flags: str) -> tuple[float, float]:
    proc, address = start_nsqd(*flags)
    try:
        reader = script("bench_reader.py", f"--nsqd-tcp-address={address}",
                        f"--runfor={parse_duration(runfor) + 5}s")
        time.sleep(1)
        script("bench_writer.py", f"--nsqd-tcp-address={address}", f"--runfor={runfor}",
               "--connections=1").communicate()
        return rate(reader.communicate()[0]), cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait()


def run_http_pub(runfor: str) -> tuple[float, float]:
    port = free_port()
    proc, _ = start_nsqd(f"--http-address=127.0.0.1:{port}")
    try:
        out = script("bench_http_pub.py", f"--nsqd-http-address=127.0.0.1:{port}", f"--runfor={runfor}",
                     "--connections=4").communicate()[0]
        return float(re.search(r"([\d.]+)req/s", out).group(1)), cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runfor", default="10s")
    args = parser.parse_args()
    benches = (
        ("publish", "msgs/s", lambda: run_publish(args.runfor)),
        ("e2e", "msgs/s", lambda: run_e2e(args.runfor)),
        ("publish disk", "msgs/s", lambda: run_publish(args.runfor, "--mem-queue-size=0")),
        ("e2e disk", "msgs/s", lambda: run_e2e(args.runfor, "--mem-queue-size=0")),
        ("http pub", "req/s", lambda: run_http_pub(args.runfor)),
    )
    for name, unit, bench in benches:
        results = [bench() for _ in range(args.runs)]
        rates = [r for r, _ in results]
        print(f"{name}: median {statistics.median(rates):,.0f} {unit} over {args.runs} runs "
              f"({', '.join(f'{r:,.0f}' for r in rates)}); nsqd CPU s per run: "
              f"{', '.join(f'{c:.1f}' for _, c in results)}", flush=True)
    for name in ("bench_memory.py", "bench_restart.py"):
        print(subprocess.run([sys.executable, str(ROOT / "bench" / name)], capture_output=True,
                             text=True).stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
