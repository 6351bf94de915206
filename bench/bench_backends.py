"""nsqd's I/O backends (nsqd/io_backend.py) under NSQ's own bench tools, and against another checkout.

    python bench/bench_backends.py [--runs=3] [--runfor=10s] [--base-root=DIR] [--loads=publish,pubsub,pub16]
    python bench/bench_backends.py --callgrind [--count=100000] [--base-root=DIR] [--loads=publish,consume,pub]

Daemons, a fresh one for each round, in turn within every round so that all see the same load:
base (with --base-root: that checkout's nsqd, e.g. the code before a change), auto (this
checkout's default: the epoll fast path on Linux) and portable (``--io-backend=portable``).
The loads are the side-by-side benchmark's (bench/loads.py): by default NSQ's bench_writer alone
with every message in memory (publish), bench_reader and bench_writer at once with default flags
(pubsub), and PUB one message at a time on 16 connections (pub16). Every round is logged to stderr;
stdout gets, per load and daemon, the medians of the figures and of nsqd's CPU seconds per million
messages (/proc), and the ratios to the first daemon's medians.

With --callgrind, nsqd runs under valgrind (one run each: instruction counts barely vary) and the
figure is its instructions per message for a fixed amount of work on one connection: MPUB batches
of 200 into memory (publish), draining a filled channel with bench/bench_reader.py (consume:
delivery and FIN) and PUB one at a time, each waiting for its OK (pub); or, with
--loads=nsq-publish,pub16, per message NSQ's bench_writer publishes into memory, or bench_pub.py
on 16 connections with default flags, in --runfor.
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import go_tools, nsq_tools  # noqa: E402
from bench.bench_beyond import Meter, stop  # noqa: E402
from bench.loads import IN_MEMORY, Daemon, nsq_tool_loads, replica_loads  # noqa: E402
from bench.nsq_socket import BenchConnection  # noqa: E402
from bench.nsqd_process import OURS, running_nsqd  # noqa: E402
from bench.side_by_side import medians, round_text  # noqa: E402
from common.commands import Mpub, Pub, Sub  # noqa: E402

BATCH = 200
SIZE = 200


def daemons(args) -> dict[str, tuple[tuple[str, ...], Path]]:
    """name -> (nsqd's command, the checkout it runs in)."""
    ours = {"auto": (OURS, ROOT), "portable": ((*OURS, "--io-backend=portable"), ROOT)}
    chosen = {name: ours[name] for name in args.daemons.split(",")}
    return {"base": (OURS, args.base_root.resolve()), **chosen} if args.base_root else chosen


def timed(args) -> None:
    loads = {load.key: load for load in [*nsq_tool_loads(args.runfor, 4, 4), *replica_loads(args.runfor)]}
    chosen = daemons(args)
    names = list(chosen)
    for key in (args.loads or "publish,pubsub,pub16").split(","):
        load = loads[key]
        rounds = {name: [] for name in names}
        for number in range(args.runs):
            for name in names[number % len(names):] + names[:number % len(names)]:
                command, root = chosen[name]
                with running_nsqd(*load.flags, command=command, root=root) as (proc, tcp_address, http_address):
                    result = load.run(Daemon(proc.pid, tcp_address, http_address))
                rounds[name].append(result)
                print(f"{key} round {number + 1}, {name}: {round_text(load, result)}", file=sys.stderr, flush=True)
        first_figures, first_cpu, _ = medians(rounds[names[0]])
        for name in names:
            figures, cpu, _ = medians(rounds[name])
            ratios = " / ".join(f"{mine / theirs:.3f}" for mine, theirs in zip(figures, first_figures))
            print(f"{key} {name}: {' / '.join(f'{figure:,.0f}' for figure in figures)} {load.unit} "
                  f"({ratios} of {names[0]}), nsqd CPU {cpu:.2f} s per million ({cpu / first_cpu:.3f})", flush=True)


# -- instruction counts (--callgrind) -------------------------------------------------------


def counted(meter: Meter, flags: list[str], work) -> float:
    """nsqd's instructions per message for ``work(address)``, which returns its message count."""
    proc, address, _ = meter.start(flags)
    try:
        warm = BenchConnection(address)
        warm.send(Sub("sub_bench", "ch").to_bytes())  # topic and channel exist before the measured work
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
        reader = go_tools.start_tool("bench_reader.py", f"--nsqd-tcp-address={address}", "--runfor=600s",
                                     f"--count={count}")
        reader.communicate()
        return count
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


def nsq_writer_work(runfor: str):
    """NSQ's bench_writer for ``runfor`` (GOMAXPROCS connections, each an MPUB of 200 at a time)."""
    def work(address: str) -> int:
        return nsq_tools.finish(nsq_tools.start("bench_writer", address, f"--runfor={runfor}")).messages
    return work


def pub16_work(runfor: str):
    """bench/bench_pub.py for ``runfor``: PUB one message at a time on 16 connections."""
    def work(address: str) -> int:
        out = go_tools.start_tool("bench_pub.py", f"--nsqd-tcp-address={address}", f"--runfor={runfor}",
                                  "--connections=16").communicate()[0]
        return int(re.search(r"(\d+) msgs -", out).group(1))
    return work


def callgrind(args) -> None:
    works = {"nsq-publish": ([IN_MEMORY], nsq_writer_work(args.runfor)), "pub16": ([], pub16_work(args.runfor)),
             "publish": ([IN_MEMORY], mpub_work(args.count)),
             "consume": ([f"--mem-queue-size={args.count + BATCH}"], consume_work(args.count)),
             "pub": ([IN_MEMORY], pub_work(args.count // 10))}
    for key in (args.loads or "publish,consume,pub").split(","):
        work_flags, work = works[key]
        for name, (command, root) in daemons(args).items():
            per_message = counted(Meter(True, root), [*work_flags, *command[len(OURS):]], work)
            print(f"{key} {name}: nsqd {per_message:,.0f} instructions/msg", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--runfor", default="10s")
    parser.add_argument("--count", type=int, default=100_000, help="messages of each --callgrind load")
    parser.add_argument("--loads", help="load keys, comma-separated (see above)")
    parser.add_argument("--base-root", type=Path, help="also run this checkout's nsqd, first")
    parser.add_argument("--daemons", default="auto,portable", help="this checkout's: auto, portable or both")
    parser.add_argument("--callgrind", action="store_true", help="count nsqd's instructions (valgrind)")
    args = parser.parse_args()
    if args.callgrind:
        callgrind(args)
    else:
        timed(args)


if __name__ == "__main__":
    main()
