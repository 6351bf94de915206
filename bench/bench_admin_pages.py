"""nsqadmin's own latency with a large cluster behind it: the topics page, a topic's API, a channel page.

    python bench/bench_admin_pages.py [--runs=3] [--requests=30] [--nodes=20] [--topics=200] [--channels=5] [--clients=10]

A fake cluster (bench/fake_stats_cluster.py, one process) answers as --nodes nsqd with
--topics topics of --channels channels and --clients clients each, behind one nsqlookupd;
its answers are pre-rendered, so what is measured is nsqadmin: the fan-out to every nsqd
(concurrent), parsing their /stats, aggregating, rendering. Each run starts a fresh
nsqadmin process pointed at the fake lookupd and sends, one at a time over a keep-alive
connection, --requests requests per route after a warm-up:

    GET /                                   topics page (every nsqd's /stats, without clients)
    GET /api/topics/topic-NNN               a topic summed over every nsqd (JSON)
    GET /topics/topic-NNN/channel-N         a channel page (every nsqd's channel with its clients)

Prints median and p90 latency per route and run, the medians over runs against the
targets (300 / 100 / 200 ms), and nsqadmin's CPU milliseconds per request.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_lookupd import cpu_seconds  # noqa: E402

TARGETS_MS = {"topics page": 300, "topic API": 100, "channel page": 200}
WARMUP_REQUESTS = 3


def start_fake_cluster(args) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fake_stats_cluster.py"), f"--nodes={args.nodes}",
                             f"--topics={args.topics}", f"--channels={args.channels}", f"--clients={args.clients}"],
                            stdout=subprocess.PIPE, text=True)
    return proc, json.loads(proc.stdout.readline())


def start_nsqadmin(lookupd_port: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "nsqadmin", "--http-address=127.0.0.1:0",
                             f"--lookupd-http-address=127.0.0.1:{lookupd_port}", "--stats-interval=0",
                             "--rollup-interval=0"], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        match = re.search(r"HTTP: listening on (127\.0\.0\.1:\d+)", line)
        if match:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, f"http://{match.group(1)}"
    raise RuntimeError("nsqadmin did not start")


def routes(args, n: int) -> dict[str, str]:
    topic = f"topic-{(n * 37) % args.topics:03d}"
    return {"topics page": "/", "topic API": f"/api/topics/{topic}",
            "channel page": f"/topics/{topic}/channel-{n % args.channels}"}


def check(name: str, answer: httpx.Response, nodes: int) -> None:
    """Every answer complete: 200 and no daemon missing from it."""
    if answer.status_code != 200 or "WARNING" in answer.text or "Partial results" in answer.text:
        raise RuntimeError(f"{name}: {answer.status_code} {answer.text[:300]}")
    if name == "topic API" and len(answer.json()["nodes"]) != nodes:
        raise RuntimeError(f"{name}: {len(answer.json()['nodes'])} nodes of {nodes}")


def measure(args, lookupd_port: int) -> dict[str, dict]:
    admin, url = start_nsqadmin(lookupd_port)
    results = {}
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            for n in range(WARMUP_REQUESTS):
                for name, path in routes(args, n).items():
                    check(name, client.get(path), args.nodes)
            for name in TARGETS_MS:
                latencies = []
                cpu_before = cpu_seconds(admin.pid)
                for n in range(args.requests):
                    started = time.perf_counter()
                    answer = client.get(routes(args, n)[name])
                    latencies.append((time.perf_counter() - started) * 1000)
                    check(name, answer, args.nodes)
                cpu_ms = (cpu_seconds(admin.pid) - cpu_before) * 1000 / args.requests
                latencies.sort()
                results[name] = {"median": statistics.median(latencies),
                                 "p90": latencies[int(len(latencies) * 0.9) - 1], "cpu_ms": cpu_ms}
    finally:
        admin.terminate()
        admin.wait(timeout=15)
    return results


def fake_side_ms(cluster: dict) -> float:
    """The fake nsqd's own latency for a full /stats without clients (what the topics page asks each)."""
    with httpx.Client() as client:
        url = f"http://127.0.0.1:{cluster['nsqd'][0]}/stats?format=json&include_clients=false"
        client.get(url)
        started = time.perf_counter()
        for _ in range(10):
            client.get(url)
        return (time.perf_counter() - started) * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--channels", type=int, default=5)
    parser.add_argument("--clients", type=int, default=10)
    args = parser.parse_args()
    fake, cluster = start_fake_cluster(args)
    try:
        print(f"fake cluster: {args.nodes} nsqd x {args.topics} topics x {args.channels} channels x "
              f"{args.clients} clients; one full /stats from the fake side: {fake_side_ms(cluster):.1f} ms", flush=True)
        runs = []
        for run in range(1, args.runs + 1):
            result = measure(args, cluster["lookupd"])
            runs.append(result)
            print(f"run {run}: " + "; ".join(f"{name} median {r['median']:.1f} ms, p90 {r['p90']:.1f} ms, "
                                             f"{r['cpu_ms']:.1f} CPU-ms" for name, r in result.items()), flush=True)
    finally:
        fake.terminate()
        fake.wait(timeout=15)
    print("\nmedians over runs:")
    for name, target in TARGETS_MS.items():
        median = statistics.median(run[name]["median"] for run in runs)
        cpu = statistics.median(run[name]["cpu_ms"] for run in runs)
        verdict = "ok" if median < target else "MISSED"
        print(f"  {name:13s} {median:7.1f} ms (target < {target} ms: {verdict}), nsqadmin {cpu:.1f} CPU-ms per request")


if __name__ == "__main__":
    main()
