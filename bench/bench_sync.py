"""Publish throughput with --sync-every=1 (each answer waits for an fsync) against the default.

    python bench/bench_sync.py --runs=3 --runfor=5s --connections=4 --publishers=16

Every message goes through a disk queue (--mem-queue-size=0, a topic without channels).
Each of --connections worker processes plays --publishers concurrent publishers sharing
its connection, as goroutines share a go-nsq Producer: each keeps one PUB outstanding
(--batch-size > 1: one MPUB) and sends the next when its OK arrives. A fresh nsqd per run,
the two modes taking turns; the fsyncs it makes (fsync + fdatasync system calls, counted
by ``perf stat`` on its process) are reported beside msgs/s and its CPU seconds. Medians
of --runs.
"""

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import cpu_seconds, start_nsqd  # noqa: E402
from bench.workers import run_workers  # noqa: E402
from common.commands import Mpub, Pub  # noqa: E402
from common.frames import FRAME_TYPE_ERROR  # noqa: E402
from common.goflags import parse_duration  # noqa: E402

TOPIC = "sync_bench"
FSYNC_EVENTS = "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync"
PERF_ATTACH_TIME = 1.0  # perf stat -p misses what happens in its first few hundred ms


def publish(address: str, size: int, batch_size: int, publishers: int, deadline: float, result) -> None:
    """``publishers`` commands in flight on one connection; the messages acknowledged."""
    conn = BenchConnection(address)
    body = b"s" * size
    command = (Pub(TOPIC, body) if batch_size == 1 else Mpub(TOPIC, [body] * batch_size)).to_bytes()
    conn.send(command * publishers)
    outstanding, acknowledged = publishers, 0
    while outstanding:
        answers = 0
        for frame in conn.read_frames():
            if frame.frame_type == FRAME_TYPE_ERROR:
                raise RuntimeError(frame.data.decode())
            if frame.data != b"_heartbeat_":
                answers += 1
        acknowledged += answers * batch_size
        outstanding -= answers
        if time.monotonic() < deadline and answers:
            conn.send(command * answers)
            outstanding += answers
    conn.close()
    result.put(acknowledged)


def count_fsyncs(pid: int, seconds: float) -> subprocess.Popen | None:
    """``perf stat`` on the process from now for ``seconds``, once it has had
    PERF_ATTACH_TIME to attach; None when perf cannot be run."""
    try:
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", FSYNC_EVENTS, "-p", str(pid), "--", "sleep",
                                 str(PERF_ATTACH_TIME + seconds)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        return None
    time.sleep(PERF_ATTACH_TIME)
    return perf


def fsyncs_counted(perf: subprocess.Popen | None) -> int | None:
    if perf is None:
        return None
    output = perf.communicate()[1]
    counts = [int(match) for match in re.findall(r"^(\d+),", output, re.MULTILINE)]
    return sum(counts) if perf.returncode == 0 and counts else None


def one_run(flags: list[str], args) -> tuple[float, float | None, float]:
    """msgs/s, fsyncs/s (None without perf) and nsqd's CPU seconds for one fresh nsqd."""
    proc, address, _ = start_nsqd("--mem-queue-size=0", *flags)
    try:
        runfor = parse_duration(args.runfor)
        perf = count_fsyncs(proc.pid, runfor + 0.5)
        total, elapsed = run_workers(publish, (address, args.size, args.batch_size, args.publishers),
                                     args.connections, runfor)
        fsyncs = fsyncs_counted(perf)
        return total / elapsed, None if fsyncs is None else fsyncs / runfor, cpu_seconds(proc.pid)
    finally:
        proc.terminate()
        proc.wait()


def median_or_none(values: list) -> float | None:
    return None if None in values else statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runfor", default="5s")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--publishers", type=int, default=16, help="concurrent publishers per connection")
    args = parser.parse_args()
    modes = {"default --sync-every (2500)": [], "--sync-every=1": ["--sync-every=1"]}
    print(f"{args.connections} connections x {args.publishers} publishers, {args.size}-byte messages, "
          f"{'PUB' if args.batch_size == 1 else f'MPUB of {args.batch_size}'}, --mem-queue-size=0, "
          f"medians of {args.runs} runs of {args.runfor} (the modes take turns)")
    runs: dict[str, list] = {name: [] for name in modes}
    for _ in range(args.runs):
        for name, flags in modes.items():
            runs[name].append(one_run(flags, args))
    for name, results in runs.items():
        rates, fsyncs, cpu = (median_or_none([result[i] for result in results]) for i in range(3))
        fsync_text = "n/a (no perf)" if fsyncs is None else f"{fsyncs:,.0f}"
        print(f"{name:28} {rates:>10,.0f} msgs/s  {fsync_text:>8} fsyncs/s  nsqd CPU {cpu:.1f}s  "
              f"(runs: {', '.join(f'{result[0]:,.0f}' for result in results)} msgs/s)")

if __name__ == "__main__":
    main()
