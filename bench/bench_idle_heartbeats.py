"""nsqd's cost per heartbeat with thousands of idle consumers, this checkout and another alternating.

    python bench/bench_idle_heartbeats.py [--consumers=5000] [--heartbeat-interval=30s] [--window=60s]
                                          [--rounds=3] [--before=PATH] [--callgrind]

The idle cost of nsqd with many consumers is their heartbeats: nsqd writes each client
``_heartbeat_`` every heartbeat interval and the client answers NOP (bench/bench_many_consumers.py's
consumers, subscribed with RDY 1 to channels nobody publishes to). Once every consumer is
subscribed and has had its first heartbeat, this measures nsqd's CPU (utime + stime from /proc)
over --window, per heartbeat due in it (consumers x window / interval): CPU seconds per 1,000
heartbeats and the share of a core. A shorter interval multiplies the heartbeats, so their cost
stands out of a shared machine's noise (but finds the connections' memory warmer than NSQ's
default 30 s does). Each round runs this checkout's nsqd and then, with --before, that
checkout's (same venv), a fresh daemon each; stdout gets the medians, their ratio, and the load
average before and after.

--callgrind: nsqd runs under valgrind, and the figure is its instructions per heartbeat over the
window; keep the heartbeats to a few hundred a second (e.g. --consumers=1000
--heartbeat-interval=10s --window=20s) so the slowed nsqd keeps up. The count depends on how many
heartbeats share a wake-up of nsqd's, which the machine's load changes (code a small change apart
gave 84,000 and 53,000 at loads ~7 and 14, with 963 and 324 epoll waits): compare daemons
measured at once.
"""

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_beyond import Meter, stop  # noqa: E402
from bench.bench_many_consumers import start_consumers  # noqa: E402
from bench.side_by_side import load_average  # noqa: E402
from common.goflags import parse_duration  # noqa: E402

TOPICS = 100
PROCESSES = 2


def one_run(meter: Meter, args, heartbeat_s: float) -> tuple[float, float]:
    """(nsqd's cost per heartbeat, its share of a core) over the window; the cost is CPU
    seconds, or instructions with --callgrind."""
    done, results = multiprocessing.Event(), multiprocessing.Queue()
    topics = [f"idle{index}" for index in range(TOPICS)]
    proc, address, _ = meter.start([])
    try:
        workers = start_consumers(address, topics, args.consumers, PROCESSES, round(heartbeat_s * 1000), done,
                                  results)
        try:
            time.sleep(heartbeat_s + 1)  # every consumer has had its first heartbeat
            began, t0 = meter.begin(proc), time.monotonic()
            time.sleep(args.window)
            t1 = time.monotonic()
            cost = meter.end(proc, began)
        finally:
            done.set()
        counts = [results.get(timeout=120) for _ in workers]
        for worker in workers:
            worker.join(timeout=30)
    finally:
        stop(proc)
    if sum(count["lost"] for count in counts):
        raise RuntimeError("consumers were disconnected while idle")
    return cost / (args.consumers * (t1 - t0) / heartbeat_s), cost / (t1 - t0)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--consumers", type=int, default=5000)
    parser.add_argument("--heartbeat-interval", default="30s")
    parser.add_argument("--window", default="60s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="also the nsqd of this checkout (e.g. main's)")
    parser.add_argument("--callgrind", action="store_true", help="count nsqd's instructions (valgrind)")
    args = parser.parse_args(argv)
    args.window = parse_duration(args.window)
    heartbeat_s = parse_duration(args.heartbeat_interval)
    roots = {"this": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in roots}
    loads = [load_average()]
    for number in range(1, args.rounds + 1):
        for name, root in roots.items():
            runs[name].append(one_run(Meter(args.callgrind, root), args, heartbeat_s))
            print(f"round {number}, {name}: {figure(args, *runs[name][-1])} (load {load_average():.2f})",
                  file=sys.stderr, flush=True)
    loads.append(load_average())
    print(f"{args.consumers} idle consumers, heartbeat {args.heartbeat_interval}, window {args.window:g}s, "
          f"{args.rounds} round(s), load {loads[0]:.2f} -> {loads[1]:.2f}; medians:")
    medians = {name: (statistics.median(run[0] for run in results), statistics.median(run[1] for run in results))
               for name, results in runs.items()}
    for name, (per_heartbeat, per_second) in medians.items():
        print(f"  {name}: {figure(args, per_heartbeat, per_second)}")
    if "before" in medians:
        print(f"  this / before: {medians['this'][0] / medians['before'][0]:.2f}")


def figure(args, per_heartbeat: float, per_second: float) -> str:
    if args.callgrind:
        return f"{per_heartbeat:,.0f} instructions per heartbeat"
    return f"{per_heartbeat * 1000:.4f} CPU s per 1,000 heartbeats, {per_second * 100:.2f}% of a core"


if __name__ == "__main__":
    main(sys.argv[1:])
