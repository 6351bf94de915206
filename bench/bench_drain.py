"""Drain a backlog that a publish left on disk.

    python bench/bench_drain.py [--runs=3] [--fill=10s] [--runfor=10s]

Each run starts a fresh nsqd with default flags (--mem-queue-size=10000), runs
bench_writer (1 connection, MPUB batches of 200 x 200 bytes) for --fill into a topic with
no channel, so all but 10,000 messages wait in the topic's disk queue, then bench_reader
(1 connection, RDY 2500, FIN each, NSQ's flush rule) subscribes and consumes for --runfor
or until the backlog is gone. Printed: the reader's rate and nsqd's CPU seconds per million
messages drained.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import go_tools  # noqa: E402
from bench.nsqd_process import cpu_seconds, running_nsqd  # noqa: E402
from bench.report import figure  # noqa: E402


def one_run(fill: str, runfor: str) -> tuple[float, float, int]:
    """The drain rate, nsqd CPU s per million drained, and the backlog."""
    with running_nsqd() as (proc, address):
        backlog = go_tools.messages(go_tools.finish(go_tools.start_tool(
            "bench_writer.py", f"--nsqd-tcp-address={address}", f"--runfor={fill}")))
        before = cpu_seconds(proc.pid)
        out = go_tools.finish(go_tools.start_tool("bench_reader.py", f"--nsqd-tcp-address={address}",
                                                  f"--runfor={runfor}", f"--count={backlog}"))
        return go_tools.rate(out), (cpu_seconds(proc.pid) - before) * 1e6 / go_tools.messages(out), backlog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fill", default="10s", help="how long to publish the backlog")
    parser.add_argument("--runfor", default="10s", help="how long to drain at most")
    args = parser.parse_args()
    runs = [one_run(args.fill, args.runfor) for _ in range(args.runs)]
    print(figure("drain a disk backlog", "msgs/s", [r for r, _, _ in runs], [c for _, c, _ in runs],
                 f"; backlogs: {', '.join(f'{b:,}' for _, _, b in runs)} msgs"), flush=True)


if __name__ == "__main__":
    main()
