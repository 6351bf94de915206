"""NSQ's nsqd (Go, v1.3.0) and this project's side by side under NSQ's own bench tools: the
README's benchmark tables, measured in one run.

    python bench/side_by_side.py [--runs=3] [--runfor=10s] [--channels=4] [--consumers=4] [--loads=KEY,...]

For each load (bench/loads.py), --runs rounds; each round runs the load against a fresh Go nsqd
and then against a fresh one of ours (Go, ours, Go, ours, ...), each in a fresh data directory.
Every round is logged to stderr as it ends. Then stdout gets the README's block: how it was
measured, and a Markdown table for the loads of NSQ's bench_writer and bench_reader (which open
GOMAXPROCS connections each) and one for the extra loads (what NSQ's tools cannot do, and the
Python replicas of NSQ's tools): for each, the median figure on each daemon, the ratio of the
medians ours/Go, and each daemon's and the clients' CPU seconds per million messages (nsqd's from
/proc/<pid>/stat of the daemon process alone).
"""

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import nsq_tools  # noqa: E402
from bench.loads import Daemon, LatencyLoad, Load, Round, nsq_tool_loads, replica_loads  # noqa: E402
from bench.nsqd_process import OURS, running_nsqd  # noqa: E402
from tests.go_nsq import go_program, missing_reason  # noqa: E402

DAEMONS = (("Go", (go_program("nsqd"),)), ("ours", OURS))


def one_round(load, command: tuple[str, ...]) -> Round:
    with running_nsqd(*load.flags, command=command) as (proc, tcp_address, http_address):
        return load.run(Daemon(proc.pid, tcp_address, http_address))


def load_average() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


class Measured(NamedTuple):
    load: Load | LatencyLoad
    rounds: dict[str, list[Round]]  # by daemon
    load_averages: tuple[float, float]  # before, after


def measure(load, runs: int) -> Measured:
    """Every round of ``load`` on each daemon, alternating, each logged as it ends."""
    before = load_average()
    rounds: dict[str, list[Round]] = {name: [] for name, _ in DAEMONS}
    for number in range(1, runs + 1):
        for name, command in DAEMONS:
            result = one_round(load, command)
            rounds[name].append(result)
            print(f"{load.key} round {number}, {name}: {round_text(load, result)}", file=sys.stderr, flush=True)
    after = load_average()
    print(f"{load.key}: load average {before:.2f} -> {after:.2f}", file=sys.stderr, flush=True)
    return Measured(load, rounds, (before, after))


def round_text(load, result: Round) -> str:
    figures = " / ".join(f"{figure:,.3f}" if load.unit == "ms" else f"{figure:,.0f}" for figure in result.figures)
    clients = "" if result.clients_cpu is None else f", clients {result.clients_cpu:.2f}"
    remark = f"; {load.remark_label}: {result.remark}" if result.remark else ""
    return f"{figures} {load.unit}; CPU s per million: nsqd {result.nsqd_cpu:.2f}{clients}{remark}"


def figure_text(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.3g} ms"
    if value >= 100_000:
        return f"{value / 1000:,.0f}k"
    return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"


def medians(rounds: list[Round]) -> tuple[list[float], float, float | None]:
    """The median of each figure (in, out), of nsqd's CPU, of the clients' CPU."""
    figures = [statistics.median(figures) for figures in zip(*(result.figures for result in rounds))]
    clients = [result.clients_cpu for result in rounds if result.clients_cpu is not None]
    clients_median = statistics.median(clients) if clients else None
    return figures, statistics.median(result.nsqd_cpu for result in rounds), clients_median


def table_row(load, rounds: dict[str, list[Round]]) -> str:
    (go, go_cpu, go_clients), (ours, ours_cpu, ours_clients) = medians(rounds["Go"]), medians(rounds["ours"])
    ratios = " / ".join(f"{mine / theirs:.2f}" if theirs else "-" for mine, theirs in zip(ours, go))
    clients = "-" if go_clients is None else f"{go_clients:.2f} / {ours_clients:.2f}"
    cells = (f"{load.title}: {load.commands()}", " / ".join(figure_text(value, load.unit) for value in go),
             " / ".join(figure_text(value, load.unit) for value in ours), ratios, f"{go_cpu:.2f} / {ours_cpu:.2f}",
             clients)
    return "| " + " | ".join(cells) + " |"


TABLE_HEAD = ("| load: nsqd's flags; the clients | Go nsqd v1.3.0 | this nsqd | ours / Go | nsqd CPU s per million "
              "msgs, Go / ours | clients' CPU s per million, Go / ours |\n|---|---|---|---|---|---|")


def how_measured(args, measured: list[Measured]) -> str:
    averages = [value for result in measured for value in result.load_averages]
    commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip() or "an unknown commit"
    rounds = f"{args.runs} round{'s' if args.runs > 1 else ''}"
    return (f"`python bench/side_by_side.py --runs={args.runs} --runfor={args.runfor} --channels={args.channels} "
            f"--consumers={args.consumers}` on `{commit}`, {os.cpu_count()} CPUs, load average (1 min) "
            f"{min(averages):.2f}-{max(averages):.2f}: for each load {rounds}, Go nsqd v1.3.0 then this nsqd, each a "
            "fresh daemon in a fresh data directory; medians of the rounds (msgs/s unless said) and the ratio of the "
            "medians. NSQ's bench_writer and bench_reader open GOMAXPROCS connections each "
            f"({nsq_tools.connections()} here unless the command sets it).")


def report(args, measured: list[Measured]) -> str:
    """The README's block: how it was measured, then the two tables and the remarks."""
    lines = [how_measured(args, measured), ""]
    for replica, heading in ((False, "NSQ's own bench_writer and bench_reader:"),
                             (True, "Extra loads, with this project's Python load generators:")):
        rows = [table_row(result.load, result.rounds) for result in measured if result.load.replica == replica]
        if rows:
            lines += [heading, "", TABLE_HEAD, *rows, ""]
    for result in measured:
        if result.load.remark_label:
            each = [f"{name} " + ", ".join(one.remark for one in result.rounds[name]) for name, _ in DAEMONS]
            lines.append(f"- {result.load.key}, {result.load.remark_label}: " + "; ".join(each))
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="rounds of each load on each daemon")
    parser.add_argument("--runfor", default="10s", help="how long each client runs (a Go duration)")
    parser.add_argument("--channels", type=int, default=4, help="channels of the channels load")
    parser.add_argument("--consumers", type=int, default=4, help="consumers of the consumers load")
    parser.add_argument("--loads", default="", help="only these loads (keys, comma-separated)")
    args = parser.parse_args()
    if reason := missing_reason():
        parser.exit(2, f"side_by_side: {reason}\n")
    loads = [*nsq_tool_loads(args.runfor, args.channels, args.consumers), *replica_loads(args.runfor)]
    chosen = set(args.loads.split(",")) if args.loads else {load.key for load in loads}
    if unknown := chosen - {load.key for load in loads}:
        parser.error(f"unknown loads {sorted(unknown)}; known: {', '.join(load.key for load in loads)}")
    measured = [measure(load, args.runs) for load in loads if load.key in chosen]
    print(report(args, measured), end="")


if __name__ == "__main__":
    main()
