"""Every stats-history speed and cost target in one run: the rollup job, the recorder, and what
keeping both running costs.

    python bench/bench_history.py [--runs=3] [--data=/tmp/nsq-rollup-bench] [--flushes] [--cost-minutes=10]

Runs bench_rollup.py (the first full rollup of 24 h of 10 nodes x 200 channels and a one-minute
incremental run, `nsqadmin-rollup --spark-master local[2]` as whole processes, then one-minute
runs in a warm worker's session, and DuckDB over the same files), with --flushes also over the
raw files as the recorder writes them (a file a minute, compacted by that first run), then
bench_recorder.py (nsqadmin's CPU per poll of 10 nsqd), then bench_history_cost.py (nsqadmin and
its rollup worker at default settings over a fake 10 x 200 cluster, measured from outside for
--cost-minutes; 0 skips it), one after the other so they do not compete for the two cores. Their
output is shown as it comes, and their verdicts again at the end.
"""

import argparse
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def run(script: str, *args: str) -> list[str]:
    """Run a benchmark, echoing its output; its lines of medians."""
    command = [sys.executable, str(BENCH / script), *args]
    print(f"$ {' '.join(['python', f'bench/{script}', *args])}", flush=True)
    medians = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as bench:
        for line in bench.stdout:
            print(line, end="", flush=True)
            if line.startswith(("median", "total:")):
                medians.append(line.strip())
    if bench.returncode != 0:
        raise SystemExit(f"{script} exited {bench.returncode}")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data", default="/tmp/nsq-rollup-bench")
    parser.add_argument("--flushes", action="store_true", help="also roll up a day of the recorder's own files")
    parser.add_argument("--cost-minutes", type=float, default=10.0, help="minutes of bench_history_cost (0: skip)")
    args = parser.parse_args()
    results = [("rollup, hourly files", run("bench_rollup.py", f"--runs={args.runs}", f"--data={args.data}"))]
    if args.flushes:
        results.append(("rollup, a file a minute", run("bench_rollup.py", f"--runs={args.runs}", f"--data={args.data}",
                                                        "--layout=flushes")))
    results.append(("recorder", run("bench_recorder.py", f"--runs={max(args.runs, 3)}")))
    if args.cost_minutes:
        results.append(("cost", run("bench_history_cost.py", f"--minutes={args.cost_minutes:g}")))
    print("\nstats history:")
    for name, medians in results:
        for line in medians:
            print(f"  {name}: {line}")


if __name__ == "__main__":
    main()
