"""The stats recorder's cost to nsqadmin: CPU per poll of a large cluster (issue 10).

    python bench/bench_recorder.py [--runs=5] [--polls=40] [--nodes=10] [--topics=40] [--channels=5] [--mode=nsqd]

A fake cluster (bench/fake_stats_cluster.py, its own process) answers as --nodes nsqd
with --topics topics of --channels channels each (the default: 10 nsqd x 200 channels,
each with two e2e percentiles), behind one nsqlookupd; an nsqd's numbers differ from one
/stats to the next, as a live cluster's do between polls. This process builds nsqadmin (NSQAdmin, its default options but
a temporary --stats-dir) pointed at every fake nsqd (--mode=nsqd: a poll asks each its
/stats, and its /info on a new connection) or at the fake lookupd (--mode=lookupd: the
lookupd's /nodes when the recorder's listing is due, every third poll as the polls' ticks
are 10 s apart, then each nsqd's /stats), and drives its recorder: each run does
--polls polls back to back, measured with time.process_time (every thread of this
process: nsqadmin's CPU, not the fake cluster's), then one flush of their rows to
Parquet, measured the same way. A poll is everything the recorder does for one tick:
listing the nodes, every nsqd's /stats, decoding, building the rows.

Prints per run the CPU and wall milliseconds per poll and the flush's CPU per poll it
wrote, then the medians over runs against the target: the recorder's whole cost to nsqadmin,
polling and writing the rows, under 5 ms of CPU per poll. The box is shared, and CPU time
grows when the other core is busy, so each run also times a fixed piece of work, json.loads
of one fake /stats, as a yardstick of the machine's speed then, and prints the load average.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsqadmin.history.layout import raw_dir, visible_files  # noqa: E402
from nsqadmin.nsqadmin import NSQAdmin  # noqa: E402
from nsqadmin.options import default_options  # noqa: E402

TARGET_CPU_MS = 5.0
WARMUP_POLLS = 3
TICK_US = 10_000_000
VARIANTS = 5  # renderings of each nsqd's /stats, in turn


def start_fake_cluster(args) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fake_stats_cluster.py"), f"--nodes={args.nodes}",
                             f"--topics={args.topics}", f"--channels={args.channels}", "--clients=0",
                             f"--variants={VARIANTS}"],
                            stdout=subprocess.PIPE, text=True)
    return proc, json.loads(proc.stdout.readline())


def cluster_options(mode: str, cluster: dict) -> dict:
    if mode == "lookupd":
        return {"lookupd_http_address": [f"127.0.0.1:{cluster['lookupd']}"]}
    return {"nsqd_http_address": [f"127.0.0.1:{port}" for port in cluster["nsqd"]]}


def yardstick_ms(cluster: dict) -> float:
    """CPU milliseconds of json.loads of one fake nsqd's /stats, best of 20."""
    url = f"http://127.0.0.1:{cluster['nsqd'][0]}/stats?format=json&include_clients=false"
    body = urllib.request.urlopen(url).read()
    times = []
    for _ in range(20):
        started = time.process_time()
        json.loads(body)
        times.append(time.process_time() - started)
    return min(times) * 1000


async def measure(args, cluster: dict, stats_dir: str) -> dict:
    opts = default_options(**cluster_options(args.mode, cluster), stats_dir=stats_dir, stats_interval=10.0,
                           rollup_interval=0.0)
    admin = NSQAdmin(opts)
    recorder = admin.recorder
    ts = int(time.time()) // 10 * 10_000_000
    expected = args.nodes * args.topics * (args.channels + 1)
    try:
        for n in range(WARMUP_POLLS):
            await recorder.poll(ts + n * TICK_US)
        await recorder.flush()
        cpu, wall = time.process_time(), time.perf_counter()
        for n in range(args.polls):
            await recorder.poll(ts + (WARMUP_POLLS + n) * TICK_US)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        rows = recorder.writer.rows
        if rows != expected * args.polls:
            raise RuntimeError(f"{rows} rows recorded, expected {expected * args.polls}: some nodes did not answer")
        flush_cpu = time.process_time()
        await recorder.flush()
        flush_cpu = time.process_time() - flush_cpu
    finally:
        await recorder.stop()
        await admin.upstream.aclose()
    return {"cpu_ms": cpu * 1000 / args.polls, "wall_ms": wall * 1000 / args.polls,
            "flush_cpu_ms": flush_cpu * 1000 / args.polls, "rows": expected, "yardstick_ms": yardstick_ms(cluster)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--polls", type=int, default=40)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--topics", type=int, default=40)
    parser.add_argument("--channels", type=int, default=5)
    parser.add_argument("--mode", choices=("nsqd", "lookupd"), default="nsqd")
    args = parser.parse_args()
    fake, cluster = start_fake_cluster(args)
    runs = []
    try:
        print(f"fake cluster: {args.nodes} nsqd x {args.topics} topics x {args.channels} channels "
              f"({args.topics * args.channels} channels per nsqd), --{args.mode}-http-address", flush=True)
        for run in range(1, args.runs + 1):
            with tempfile.TemporaryDirectory(prefix="bench-recorder-") as stats_dir:
                result = asyncio.run(measure(args, cluster, stats_dir))
                files = len(visible_files(raw_dir(stats_dir)))
            runs.append(result)
            print(f"run {run}: {result['rows']} rows a poll; poll {result['cpu_ms']:.2f} CPU-ms "
                  f"({result['wall_ms']:.2f} ms wall); flush to {files} file(s) {result['flush_cpu_ms']:.2f} "
                  f"CPU-ms per poll; yardstick (json.loads of one /stats) {result['yardstick_ms']:.2f} ms; "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        fake.terminate()
        fake.wait(timeout=15)
    cpu = statistics.median(run["cpu_ms"] for run in runs)
    flush = statistics.median(run["flush_cpu_ms"] for run in runs)
    yardstick = statistics.median(run["yardstick_ms"] for run in runs)
    verdict = "met" if cpu + flush < TARGET_CPU_MS else "NOT met"
    print(f"\nmedian over {args.runs} runs: {cpu:.2f} CPU-ms per poll plus {flush:.2f} CPU-ms per poll to write "
          f"its rows: {cpu + flush:.2f} CPU-ms of nsqadmin per poll (target < {TARGET_CPU_MS:.0f} ms: {verdict}); "
          f"yardstick {yardstick:.2f} ms")


if __name__ == "__main__":
    main()
