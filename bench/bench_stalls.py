"""Does anything hold nsqd's event loop? A steady publisher's round trips while each of the
issue's heavy operations happens, on NSQ's nsqd (Go, v1.3.0) and this project's, in one run.

    python bench/bench_stalls.py [--rounds=3] [--ops=create,stats,...] [--quick]

For every round and every operation (bench/stall_ops.py), Go's nsqd then ours: a fresh daemon
in a fresh data directory, the same flags, connected to one Go nsqlookupd the run shares. Its
set-up is done first (not measured); then a publisher process sends one PUB at a time (--rate
a second, 200 bytes) and times each until its OK; after a warm-up the operation runs, and the
round trips of the PUBs sent from its start until --settle seconds after its end are its
figures. Every round is logged to stderr; stdout gets a Markdown table: p50 / p99 / p99.9 / max
in ms of the round trips of every round pooled, for Go and ours, and the ratio ours/Go of each
(``/metrics`` is ours only: no ratio). Pooled, not the median of the rounds' figures: a round
of an operation lasting a second holds ~2,000 PUBs, whose p99.9 is their second-worst round
trip, so a round's p99.9 moves with one scheduling hiccup of the machine; three rounds pooled
put it on the sixth-worst, and the max is the worst of every round.
"""

import argparse
import contextlib
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import OURS, logged_listeners, start_nsqd  # noqa: E402
from bench.stall_ops import SIZE, Daemon, Operation, operations  # noqa: E402
from common.commands import Pub  # noqa: E402
from tests.go_nsq import go_program, missing_reason  # noqa: E402

STEADY_TOPIC = "steady"
WARM_UP = 0.5
PERCENTILES = (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999))
QUICK = {"rounds": 1, "new_topics": 20, "idle_topics": 200, "stats_reads": 3, "metadata_writes": 3, "delete_mb": 20,
         "empty_messages": 20_000, "tls_clients": 20, "gc_messages": 50_000, "settle": 0.3}


def steady_publisher(address: str, rate: float, ready, stop, results) -> None:
    """One PUB at a time, each sent when due (at once if late); (send time, round trip) in ns of each."""
    conn = BenchConnection(address)
    command = Pub(STEADY_TOPIC, b"s" * SIZE).to_bytes()
    conn.send(command)
    conn.read_response()
    ready.set()
    sent, trips = array("q"), array("q")
    interval, due = 1.0 / rate, time.monotonic()
    while not stop.is_set():
        time.sleep(max(0.0, due - time.monotonic()))
        before = time.monotonic_ns()
        conn.send(command)
        conn.read_response()
        sent.append(before)
        trips.append(time.monotonic_ns() - before)
        due = max(due + interval, time.monotonic() - interval)
    conn.close()
    results.put((sent.tobytes(), trips.tobytes()))


class Publisher:
    """The steady publisher in its own process (the operations' clients must not slow it)."""

    def __init__(self, address: str, rate: float):
        self.ready, self.stop, self.results = multiprocessing.Event(), multiprocessing.Event(), multiprocessing.Queue()
        self.process = multiprocessing.Process(target=steady_publisher,
                                               args=(address, rate, self.ready, self.stop, self.results))
        self.process.start()
        if not self.ready.wait(60):
            self.process.kill()
            raise RuntimeError("the steady publisher did not start")

    def round_trips(self, start_ns: int, end_ns: int) -> list[float]:
        """Stop it; the round trips (ms) of the PUBs sent between ``start_ns`` and ``end_ns``."""
        self.stop.set()
        sent_bytes, trip_bytes = self.results.get(timeout=60)
        self.process.join()
        sent, trips = array("q"), array("q")
        sent.frombytes(sent_bytes)
        trips.frombytes(trip_bytes)
        return [trip / 1e6 for at, trip in zip(sent, trips) if start_ns <= at <= end_ns]


def figures(trips: list[float]) -> dict:
    """The percentiles and max of ``trips`` (ms), their count, and the trips themselves for pooling."""
    ordered = sorted(trips)
    found = {name: ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] for name, fraction in PERCENTILES}
    return found | {"max": ordered[-1], "count": len(ordered), "trips": ordered}


@contextlib.contextmanager
def lookupd():
    """Go's nsqlookupd, for the whole run: its TCP address."""
    proc = subprocess.Popen([go_program("nsqlookupd"), "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield logged_listeners(proc, {"TCP"})["TCP"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def one_run(operation: Operation, name: str, command: tuple[str, ...], lookupd_address: str, args) -> dict:
    """The operation once on a fresh daemon: the steady publisher's figures during it."""
    with tempfile.TemporaryDirectory(prefix="nsqd-stalls-") as data_path:
        operation.prepare(data_path)
        proc, tcp_address, http_address = start_nsqd(f"--data-path={data_path}",
                                                     f"--lookupd-tcp-address={lookupd_address}", *operation.flags,
                                                     command=command)
        try:
            daemon = Daemon(name, tcp_address, http_address)
            operation.setup(daemon)
            publisher = Publisher(tcp_address, args.rate)
            time.sleep(WARM_UP)
            start = time.monotonic_ns()
            operation.act(daemon)
            time.sleep(args.settle)
            return figures(publisher.round_trips(start, time.monotonic_ns()))
        finally:  # killed: a graceful stop fsyncs every disk queue's metadata, minutes for 30,000 queues
            proc.kill()
            proc.wait(timeout=60)


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def measure(args, chosen: list[Operation], lookupd_address: str) -> dict[tuple[str, str], list[dict]]:
    """Every round of every operation on each daemon, alternating; each logged as it ends."""
    daemons = [(name, command) for name, command in (("Go", (go_program("nsqd"),)), ("ours", OURS))
               if name in args.daemons.split(",")]
    runs: dict[tuple[str, str], list[dict]] = {}
    for number in range(1, args.rounds + 1):
        for operation in chosen:
            for name, command in daemons:
                if name == "Go" and not operation.go:
                    continue
                result = one_run(operation, name, command, lookupd_address, args)
                runs.setdefault((operation.key, name), []).append(result)
                print(f"{operation.key} round {number}, {name}: " + ", ".join(
                    f"{key} {result[key]:.2f}" for key in ("p50", "p99", "p99.9", "max")) +
                      f" ms ({result['count']} PUBs); load {load_average():.2f}", file=sys.stderr, flush=True)
    return runs


def pooled(results: list[dict]) -> list[float]:
    """p50 / p99 / p99.9 / max of the round trips of every round together."""
    together = figures([trip for result in results for trip in result["trips"]])
    return [together[key] for key in ("p50", "p99", "p99.9", "max")]


def table(chosen: list[Operation], runs: dict) -> str:
    lines = ["| operation | Go nsqd v1.3.0, ms: p50 / p99 / p99.9 / max | this nsqd | ours / Go |", "|---|---|---|---|"]
    for operation in chosen:
        ours = pooled(runs[(operation.key, "ours")]) if (operation.key, "ours") in runs else None
        go = pooled(runs[(operation.key, "Go")]) if (operation.key, "Go") in runs else None
        ratio = " / ".join(f"{mine / theirs:.2f}" for mine, theirs in zip(ours, go)) if go and ours else "-"
        lines.append(f"| {operation.title} | {_ms(go)} | {_ms(ours)} | {ratio} |")
    return "\n".join(lines) + "\n"


def _ms(values: list[float] | None) -> str:
    return " / ".join(f"{value:.2f}" for value in values) if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every operation on each daemon")
    parser.add_argument("--ops", default="", help="only these operations (keys, comma-separated)")
    parser.add_argument("--daemons", default="Go,ours", help="Go, ours, or both (comma-separated)")
    parser.add_argument("--rate", type=float, default=2000.0, help="the steady publisher's PUBs a second")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds measured after an operation ends")
    parser.add_argument("--new-topics", type=int, default=200)
    parser.add_argument("--new-topic-interval", type=float, default=0.02, help="seconds between new topics")
    parser.add_argument("--idle-topics", type=int, default=10_000, help="topics of /stats, /metrics and nsqd.dat")
    parser.add_argument("--idle-channels", type=int, default=2, help="channels of each of those topics")
    parser.add_argument("--stats-reads", type=int, default=10, help="reads of /stats (and /metrics)")
    parser.add_argument("--stats-interval", type=float, default=0.5, help="seconds between reads")
    parser.add_argument("--metadata-writes", type=int, default=10, help="nsqd.dat rewrites (a topic, a pause)")
    parser.add_argument("--delete-mb", type=int, default=1024, help="MB on disk of the topic deleted")
    parser.add_argument("--empty-messages", type=int, default=1_000_000, help="messages of the channel emptied")
    parser.add_argument("--tls-clients", type=int, default=200)
    parser.add_argument("--gc-messages", type=int, default=2_000_000, help="messages queued during the full GC")
    parser.add_argument("--quick", action="store_true", help="small sizes and one round: a test of the harness")
    args = parser.parse_args()
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if reason := missing_reason():
        parser.exit(2, f"bench_stalls: {reason}\n")
    with tempfile.TemporaryDirectory(prefix="nsqd-stalls-certs-") as cert_dir, lookupd() as lookupd_address:
        every = operations(args, cert_dir)
        chosen = set(args.ops.split(",")) if args.ops else {operation.key for operation in every}
        if unknown := chosen - {operation.key for operation in every}:
            parser.error(f"unknown operations {sorted(unknown)}; known: {', '.join(op.key for op in every)}")
        selected = [operation for operation in every if operation.key in chosen]
        before = load_average()
        runs = measure(args, selected, lookupd_address)
        print(f"`python bench/bench_stalls.py {' '.join(sys.argv[1:])}`, {os.cpu_count()} CPUs, load average "
              f"(1 min) {before:.2f} -> {load_average():.2f}; steady publisher {args.rate:g} PUB/s, the PUBs of "
              f"{args.rounds} round(s) pooled:\n")
        print(table(selected, runs), end="")


if __name__ == "__main__":
    main()
