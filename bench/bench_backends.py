"""nsqd's I/O backends (nsqd/io_backend.py) under NSQ's own bench tools, against the code of another checkout.

    python bench/bench_backends.py [--runs=3] [--runfor=10s] [--base-root=DIR] [--workloads=publish,pubsub,pub16]
    python bench/bench_backends.py --callgrind [--count=100000] [--base-root=DIR] [--workloads=publish,consume,pub]

States, one fresh nsqd each, in alternating order within every run so all see the same load:
base (with --base-root: that checkout's nsqd, e.g. the code before a change), auto (this
checkout's default: the epoll fast path on Linux) and portable (--io-backend=portable).
Workloads, with NSQ v1.3.0's Go bench_writer and bench_reader (tests/go_nsq.py finds them):
publish: bench_writer alone, every message kept in memory (--mem-queue-size=100000000).
pubsub:  bench_reader and bench_writer from the same deadline, default flags; in and out.
pub16:   bench/bench_pub.py, PUB one message at a time on 16 connections, default flags.
Each prints the medians of the rates and of nsqd's CPU seconds per million messages (published;
from /proc), and every run's figures. With --callgrind, nsqd runs under valgrind (one run each:
instruction counts barely vary) and the figure is its instructions per message for a fixed
amount of work on one connection: MPUB batches of 200 (publish), draining a filled channel
with bench_reader.py (consume: delivery and FIN) and PUB one at a time (pub).
"""

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import go_tools  # noqa: E402
from bench.bench_beyond import Meter, stop  # noqa: E402
from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import cpu_seconds, start_nsqd  # noqa: E402
from common.commands import Mpub, Pub  # noqa: E402
from tests.go_nsq import go_program  # noqa: E402

IN_MEMORY = "--mem-queue-size=100000000"
BATCH = 200
SIZE = 200


def go_tool(name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([go_program(name), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finished(tool: subprocess.Popen) -> tuple[float, int]:
    """The ops/s and message count of a Go bench tool's result line."""
    out = tool.communicate()[0]
    match = re.search(r"duration: ([\d.]+)s - [\d.]+mb/s - ([\d.]+)ops/s", out)
    if tool.returncode or not match:
        raise RuntimeError(f"{tool.args[0]} failed ({tool.returncode}):\n{out}")
    seconds, rate = float(match.group(1)), float(match.group(2))
    return rate, round(rate * seconds)


def measured(flags: list[str], root: Path, load) -> tuple[list[float], float]:
    """A fresh nsqd under ``load(address)``, which returns its rates and the messages
    published: the rates, and nsqd's CPU seconds per million of those messages."""
    proc, address = start_nsqd(*flags, root=root)
    try:
        before = cpu_seconds(proc.pid)
        rates, count = load(address)
        return rates, (cpu_seconds(proc.pid) - before) * 1e6 / count
    finally:
        stop(proc)


def publish(address: str, args) -> tuple[list[float], int]:
    rate, count = finished(go_tool("bench_writer", f"--nsqd-tcp-address={address}", f"--runfor={args.runfor}"))
    return [rate], count


def pubsub(address: str, args) -> tuple[list[float], int]:
    common = (f"--nsqd-tcp-address={address}", f"--runfor={args.runfor}", f"--deadline={go_tools.deadline_in(1)}")
    reader, writer = go_tool("bench_reader", *common), go_tool("bench_writer", *common)
    (rate_in, written), (rate_out, _) = finished(writer), finished(reader)
    return [rate_in, rate_out], written


def pub16(address: str, args) -> tuple[list[float], int]:
    out = go_tools.finish(go_tools.start_tool("bench_pub.py", f"--nsqd-tcp-address={address}",
                                              f"--runfor={args.runfor}", "--connections=16"))
    seconds = float(re.search(r"duration: ([\d.]+)s", out).group(1))
    return [go_tools.rate(out)], round(go_tools.rate(out) * seconds)


WORKLOADS = {"publish": (publish, [IN_MEMORY]), "pubsub": (pubsub, []), "pub16": (pub16, [])}


# -- instruction counts (--callgrind) -------------------------------------------------------


def counted(meter: Meter, flags: list[str], work) -> float:
    """nsqd's instructions per message for ``work(address)``, which returns its message count."""
    proc, address = meter.start(flags)
    try:
        warm = BenchConnection(address)
        warm.send(b"SUB sub_bench ch\n")  # topic and channel exist before the measured work
        warm.read_response()
        warm.close()
        began = meter.begin(proc)
        count = work(address)
        return meter.end(proc, began) / count
    finally:
        stop(proc)


def mpub_work(count: int):
    def work(address: str) -> int:
        producer = BenchConnection(address)
        producer.sock.settimeout(600)
        batch = Mpub("sub_bench", [b"a" * SIZE] * BATCH).to_bytes()
        for _ in range(count // BATCH):
            producer.send(batch)
            producer.read_response()
        producer.close()
        return count // BATCH * BATCH
    return work


def consume_work(count: int):
    fill = mpub_work(count)

    def work(address: str) -> int:
        fill(address)
        out = go_tools.finish(go_tools.start_tool("bench_reader.py", f"--nsqd-tcp-address={address}",
                                                  "--runfor=600s", f"--count={count}"))
        return go_tools.messages(out)
    return work


def pub_work(count: int):
    def work(address: str) -> int:
        producer = BenchConnection(address)
        producer.sock.settimeout(600)
        command = Pub("pub_bench", b"a" * SIZE).to_bytes()
        for _ in range(count):
            producer.send(command)
            producer.read_response()
        producer.close()
        return count
    return work


def callgrind(states: dict, args) -> None:
    works = {"publish": ([IN_MEMORY], mpub_work(args.count)),
             "consume": ([f"--mem-queue-size={args.count + BATCH}"], consume_work(args.count)),
             "pub": ([IN_MEMORY], pub_work(args.count // 10))}
    for name in (args.workloads or ",".join(works)).split(","):
        work_flags, work = works[name]
        for state, (root, flags) in states.items():
            per_message = counted(Meter(True, root), [*work_flags, *flags], work)
            print(f"{name} {state}: nsqd {per_message:,.0f} instructions/msg", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runfor", default="10s")
    parser.add_argument("--count", type=int, default=100_000, help="messages per --callgrind workload")
    parser.add_argument("--workloads", help="publish,pubsub,pub16 (the default); with --callgrind publish,consume,pub")
    parser.add_argument("--base-root", type=Path, help="also run this checkout's nsqd (default flags)")
    parser.add_argument("--states", default="auto,portable", help="this checkout's states to run: auto, portable")
    parser.add_argument("--callgrind", action="store_true", help="count nsqd's instructions (valgrind)")
    args = parser.parse_args()
    ours = {"auto": (ROOT, []), "portable": (ROOT, ["--io-backend=portable"])}
    states = {name: ours[name] for name in args.states.split(",") if name}
    if args.base_root:
        states = {"base": (args.base_root.resolve(), []), **states}
    if args.callgrind:
        callgrind(states, args)
        return
    for name in (args.workloads or ",".join(WORKLOADS)).split(","):
        load, load_flags = WORKLOADS[name]
        results = {state: [] for state in states}
        order = list(states)
        for run in range(args.runs):
            for state in order[run % len(order):] + order[:run % len(order)]:
                root, flags = states[state]
                results[state].append(measured([*load_flags, *flags], root, lambda address: load(address, args)))
        for state, measured in results.items():
            rates = [statistics.median(rates[i] for rates, _ in measured) for i in range(len(measured[0][0]))]
            cpu = statistics.median(c for _, c in measured)
            runs = "; ".join(f"{' / '.join(f'{r:,.0f}' for r in rates_)} at {c:.2f}" for rates_, c in measured)
            print(f"{name} {state}: {' / '.join(f'{r:,.0f}' for r in rates)} msgs/s, nsqd CPU {cpu:.2f} s per million "
                  f"(runs: {runs})", flush=True)


if __name__ == "__main__":
    main()
