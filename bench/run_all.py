"""Every nsqd figure of the README in one run: medians of --runs fresh nsqd each, with nsqd's
CPU seconds per million messages.

    python bench/run_all.py [--runs=3] [--runfor=10s]

The load is NSQ's bench tools' (bench_writer.py, bench_reader.py: one connection each,
200-byte messages, MPUB batches of 200 each waiting for its OK; RDY 2500, a FIN for every
message with bufio's flushing):
publish:            bench_writer alone, every message kept in memory (--mem-queue-size=100000000).
pub+sub:            bench_reader and bench_writer from the same deadline, default flags; the
                    writer's rate in, the reader's out.
pub+sub mem 0:      the same with --mem-queue-size=0 (every message through the disk queue).
drain:              bench_drain.py: bench_reader draining what a --runfor bench_writer left on disk.
PUB x16:            bench_pub.py: PUB one message at a time on 16 connections.
http pub:           POST /pub, one message per request, 4 keep-alive connections.
10 channels:        bench_channels.py: one writer, a bench_reader on each of 10 channels.
latency:            bench_latency.py: publish-to-delivery at a steady 10,000 msgs/s.
memory, restart:    bench_memory.py, bench_restart.py.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import go_tools  # noqa: E402
from bench.nsqd_process import cpu_seconds, free_port, running_nsqd  # noqa: E402
from bench.report import figure  # noqa: E402

IN_MEMORY = "--mem-queue-size=100000000"


def run_publish(runfor: str) -> tuple[float, float]:
    with running_nsqd(IN_MEMORY) as (proc, address):
        before = cpu_seconds(proc.pid)
        out = go_tools.finish(go_tools.start_tool("bench_writer.py", f"--nsqd-tcp-address={address}",
                                                  f"--runfor={runfor}"))
        return go_tools.rate(out), (cpu_seconds(proc.pid) - before) * 1e6 / go_tools.messages(out)


def run_pub_sub(runfor: str, *flags: str) -> tuple[float, float, float]:
    """Rate in, rate out, nsqd CPU s per million messages (published and delivered)."""
    with running_nsqd(*flags) as (proc, address):
        before = cpu_seconds(proc.pid)
        common = (f"--nsqd-tcp-address={address}", f"--runfor={runfor}", f"--deadline={go_tools.deadline_in(1)}")
        reader = go_tools.start_tool("bench_reader.py", *common)
        writer = go_tools.start_tool("bench_writer.py", *common)
        written, read = go_tools.finish(writer), go_tools.finish(reader)
        cpu = cpu_seconds(proc.pid) - before
        return go_tools.rate(written), go_tools.rate(read), cpu * 1e6 / go_tools.messages(written)


def run_pub(runfor: str) -> tuple[float, float]:
    with running_nsqd() as (proc, address):
        before = cpu_seconds(proc.pid)
        out = go_tools.finish(go_tools.start_tool("bench_pub.py", f"--nsqd-tcp-address={address}",
                                                  f"--runfor={runfor}", "--connections=16"))
        return go_tools.rate(out), (cpu_seconds(proc.pid) - before) * 1e6 / go_tools.messages(out)


def run_http_pub(runfor: str) -> tuple[float, float]:
    port = free_port()
    with running_nsqd(f"--http-address=127.0.0.1:{port}") as (proc, _):
        before = cpu_seconds(proc.pid)
        out = go_tools.finish(go_tools.start_tool("bench_http_pub.py", f"--nsqd-http-address=127.0.0.1:{port}",
                                                  f"--runfor={runfor}", "--connections=4"))
        requests = int(re.search(r"(\d+) requests", out).group(1))
        return float(re.search(r"([\d.]+)req/s", out).group(1)), (cpu_seconds(proc.pid) - before) * 1e6 / requests


def standalone(name: str, *args: str) -> str:
    """A benchmark that runs its own nsqd and prints its own figure."""
    return subprocess.run([sys.executable, str(ROOT / "bench" / name), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runfor", default="10s")
    args = parser.parse_args()
    runs, runfor = range(args.runs), args.runfor
    results = [run_publish(runfor) for _ in runs]
    print(figure("publish, in memory", "msgs/s", [r for r, _ in results], [c for _, c in results]), flush=True)
    for name, flags in (("pub+sub, default flags", ()), ("pub+sub, --mem-queue-size=0", ("--mem-queue-size=0",))):
        results = [run_pub_sub(runfor, *flags) for _ in runs]
        print(figure(f"{name}, out", "msgs/s", [out for _, out, _ in results], [c for _, _, c in results],
                     f"; in: {', '.join(f'{i:,.0f}' for i, _, _ in results)} msgs/s"), flush=True)
    print(standalone("bench_drain.py", f"--runs={args.runs}", f"--fill={runfor}", f"--runfor={runfor}"), flush=True)
    results = [run_pub(runfor) for _ in runs]
    print(figure("PUB on 16 connections", "msgs/s", [r for r, _ in results], [c for _, c in results]), flush=True)
    results = [run_http_pub(runfor) for _ in runs]
    print(figure("HTTP POST /pub, 4 connections", "req/s", [r for r, _ in results], [c for _, c in results]),
          flush=True)
    print(standalone("bench_channels.py", f"--runs={args.runs}", f"--runfor={runfor}"), flush=True)
    print(standalone("bench_latency.py", f"--runs={args.runs}"), flush=True)
    for name in ("bench_memory.py", "bench_restart.py"):
        print(standalone(name), flush=True)


if __name__ == "__main__":
    main()
