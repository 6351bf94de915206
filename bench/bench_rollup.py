"""Time the stats-history rollup job: the first full rollup of a day of snapshots, one-minute incremental
runs, and DuckDB doing the same rollups from the same files.

    python bench/bench_rollup.py [--data=/tmp/nsq-rollup-bench] [--runs=3] [--spark-master=local[2]]
                                 [--layout=compacted|flushes] [--nodes=10] [--channels=200] [--topics=20] [--hours=24]
                                 [--warm-runs=5] [--no-duckdb]

The snapshots are generated once (bench/history_data.py) into DATA/<shape>/stats and reused by
later invocations: --layout=compacted (the default) writes a file per hour, as the job's
compaction leaves closed hours; --layout=flushes a file per minute, as the recorder leaves them
when no rollup has run yet, so the first full run also compacts the 24 hours it rolled up. Each
run hard-links them into a fresh DATA/<shape>/run/stats (the job never changes a file in place:
it publishes new files by rename and unlinks old ones, so the links are safe), runs
`nsqadmin-rollup` over everything as a new process (the first full rollup), appends one minute
as nsqadmin's recorder would, and runs it again (the incremental run).

Each run is measured as a whole process tree: wall seconds, CPU seconds and peak RSS. pyspark
does not wait for the JVM it starts, so this process becomes a child subreaper: the JVM is
reparented to it at the end and reaped here, with its resource usage. The job's log of every run
is kept in DATA/<shape>/ (run-N-full.log, run-N-incremental.log); its phases (Spark start-up,
each level's Spark work, compaction) and summary line are printed. Raw rows per second = rows /
the full run's wall seconds. The machine is shared, so every figure comes with CPU seconds and
the load average (1 minute) before and after: a run on local[2] that had both cores to itself
takes about its CPU seconds / 2 of wall time where its work is parallel.

Then, as nsqadmin's rollup worker runs (rollup_main's worker: one SparkSession kept between
runs), this process appends a minute and rolls it up, 2 + --warm-runs times on one session, its
clock 10 s after the minute (as in a live worker, the minute's hour is still open, not compacted
again by every run) and the worker's COARSER_EVERY, so one run in ten also writes the hours and
days (its figures are shown apart, and the mean a minute with it):
the first two warm it up (JVM start, classes, JIT), the others are measured, CPU seconds of this
process (the job's Python) and of its JVM. Last, DuckDB (2 threads, in this process) computes
the README's definitions of every level from the pristine raw files (tests/history_oracle.py,
the tests' oracle), for the ratio of Spark's time to DuckDB's on the same files.

The first run with a new Java, Spark or JVM options saves the JVM's classes in a class archive
as it exits (class_archive.py: seconds of extra work, once); when either archive a run uses
(the full run's and the small run's JVM options differ) is missing, an untimed warm-up run
writes them first. The data starts on 2026-01-01, so --stats-retention is set long enough to
keep all of it.
"""

import argparse
import ctypes
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.history_data import ClusterShape, append_minute, generate, newest_snapshot, retention_keeping  # noqa: E402
from nsqadmin.history import layout  # noqa: E402
from nsqadmin.history.class_archive import ClassArchive  # noqa: E402
from nsqadmin.history.spark_session import LARGE_RUN_JVM_OPTIONS, SMALL_RUN_JVM_OPTIONS  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
FULL_ROWS_PER_SECOND_TARGET = 400_000
INCREMENTAL_SECONDS_TARGET = 20.0
WARM_INCREMENTAL_CPU_TARGET = 2.0
WARM_UP_RUNS = 2
NOW_AFTER_NEWEST = timedelta(seconds=10)
# Changes when the generated files change (v2: hours in five-minute row groups, as compaction
# now writes them); data cached under an older name is not reused.
DATA_FORMAT = "v3"  # v3: start_time
# What the job's log says of its phases (rollup_job, spark_session), as (label, pattern of its seconds).
PHASES = (("Spark start-up", r"started Spark on \S+ in ([\d.]+) s"),
          ("1m Spark work", r"staged \d+ 1m partitions in ([\d.]+) s"),
          ("1h", r"staged \d+ 1h partitions in ([\d.]+) s"),
          ("1d", r"staged \d+ 1d partitions in ([\d.]+) s"),
          ("compaction", r"compacted the raw files of \d+ closed hours in ([\d.]+) s"),
          ("whole rollup", r"INFO: read \d+ raw rows .* in ([\d.]+) s"))


@dataclass(frozen=True)
class Measurement:
    wall: float
    cpu: float
    peak_rss: int  # bytes, of the largest process in the tree (the JVM)
    load_before: float
    load_after: float

    def describe(self) -> str:
        return (f"{self.wall:.1f} s wall, {self.cpu:.1f} CPU s, peak RSS {self.peak_rss / 2**20:,.0f} MiB, "
                f"load average {self.load_before:.1f} -> {self.load_after:.1f}")


def become_subreaper() -> None:
    """Orphaned descendants (pyspark's JVM) are reparented to this process, so it can reap and measure them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def run_job(stats_dir: Path, master: str, retention: str, log: Path) -> Measurement:
    """Run one rollup as a new process; wait for it and every process it left behind."""
    command = [str(Path(sys.executable).parent / "nsqadmin-rollup"), "--stats-dir", str(stats_dir),
               "--spark-master", master, "--stats-retention", retention]
    load_before = os.getloadavg()[0]
    began = time.perf_counter()
    with open(log, "w") as output:
        job = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    status, wall, cpu, peak = None, 0.0, 0.0, 0
    while True:
        try:
            pid, wait_status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            break
        cpu += usage.ru_utime + usage.ru_stime
        peak = max(peak, usage.ru_maxrss * 1024)
        if pid == job.pid:
            status = os.waitstatus_to_exitcode(wait_status)
            wall = time.perf_counter() - began
    job.returncode = status
    if status != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-20:])
        raise SystemExit(f"{' '.join(command)} exited {status}; the end of {log}:\n{tail}")
    return Measurement(wall, cpu, peak, load_before, os.getloadavg()[0])


def summary_line(log: Path) -> str:
    lines = [line for line in log.read_text().splitlines() if re.search(r"INFO: read \d+ raw rows", line)]
    return lines[-1] if lines else "(no summary line in the job's log)"


def phases(log: Path, wall: float) -> str:
    """The seconds of each phase the job logged, and what the process spent outside the rollup."""
    text = log.read_text()
    found = {label: float(match.group(1)) for label, pattern in PHASES if (match := re.search(pattern, text))}
    parts = [f"{label} {seconds:.1f} s" for label, seconds in found.items()]
    if "whole rollup" in found:
        parts.append(f"outside it (Python start, JVM exit) {wall - found['whole rollup']:.1f} s")
    if "saved the JVM's classes" in text:
        parts.append("this run saved the class archive")
    return "; ".join(parts)


def missing_class_archives() -> list[Path]:
    """The class archives of the full and the incremental runs' JVM options that do not exist yet."""
    archives = (ClassArchive.for_options(options) for options in (LARGE_RUN_JVM_OPTIONS, SMALL_RUN_JVM_OPTIONS))
    return [archive.path for archive in archives if archive is not None and not archive.path.exists()]


def prepared_data(data: Path, shape: ClusterShape, hours: int, flushes: bool) -> tuple[Path, int]:
    """The pristine stats dir for this shape and layout (generated on first use) and its row count."""
    home = data / f"{shape.nodes}n-{shape.channels}c-{shape.topics}t-{hours}h-{DATA_FORMAT}{'-flushes' if flushes else ''}"
    pristine, marker = home / "stats", home / "rows"
    if marker.exists():
        print(f"data: {int(marker.read_text()):,} rows cached in {pristine}")
        return pristine, int(marker.read_text())
    shutil.rmtree(pristine, ignore_errors=True)
    began = time.perf_counter()
    rows = generate(pristine, shape, hours, flushes=flushes)
    marker.write_text(str(rows))
    print(f"data: generated {rows:,} rows in {pristine} in {time.perf_counter() - began:.1f} s")
    return pristine, rows


def fresh_copy(pristine: Path, work: Path) -> Path:
    """A new stats dir whose raw files are hard links to the pristine ones, and no rollups."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(layout.raw_dir(pristine), layout.raw_dir(work), copy_function=os.link)
    return work


def bench_run(name: str, pristine: Path, rows: int, master: str, retention: str) -> tuple[Measurement, Measurement]:
    work = fresh_copy(pristine, pristine.parent / "run" / "stats")
    full_log = pristine.parent / f"{name.replace(' ', '-')}-full.log"
    full = run_job(work, master, retention, full_log)
    print(f"{name} full: {rows:,} rows, {full.describe()}: {rows / full.wall:,.0f} rows/s, "
          f"{rows / full.cpu:,.0f} rows per CPU s", flush=True)
    print(f"    {phases(full_log, full.wall)}")
    print(f"    {summary_line(full_log)}", flush=True)
    _, appended = append_minute(work)
    incremental_log = pristine.parent / f"{name.replace(' ', '-')}-incremental.log"
    incremental = run_job(work, master, retention, incremental_log)
    print(f"{name} incremental: +{appended:,} rows, {incremental.describe()}")
    print(f"    {phases(incremental_log, incremental.wall)}")
    print(f"    {summary_line(incremental_log)}", flush=True)
    return full, incremental


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def spread(values: list[float], unit: str) -> str:
    """The median, with the range when there are several values."""
    text = f"{statistics.median(values):.1f} {unit}"
    return text if len(values) == 1 else f"{text} ({min(values):.1f}-{max(values):.1f})"


def report(rows: int, fulls: list[Measurement], incrementals: list[Measurement]) -> None:
    full_wall = statistics.median(m.wall for m in fulls)
    incremental_wall = statistics.median(m.wall for m in incrementals)
    rate = rows / full_wall
    full_cpu = statistics.median(m.cpu for m in fulls)
    print(f"median full: {spread([m.wall for m in fulls], 's wall')}, {spread([m.cpu for m in fulls], 'CPU s')}, "
          f"{rate:,.0f} raw rows/s, {rows / full_cpu:,.0f} rows per CPU s (target >= {FULL_ROWS_PER_SECOND_TARGET:,} "
          f"rows/s: {verdict(rate >= FULL_ROWS_PER_SECOND_TARGET)})")
    print(f"median incremental: {spread([m.wall for m in incrementals], 's wall')}, "
          f"{spread([m.cpu for m in incrementals], 'CPU s')} "
          f"(target < {INCREMENTAL_SECONDS_TARGET:.0f} s: {verdict(incremental_wall < INCREMENTAL_SECONDS_TARGET)})")


def jvm_cpu_seconds() -> float:
    """CPU seconds of this process's JVM children (pyspark's gateway), from /proc."""
    total = 0.0
    for child in Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split():
        try:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def cpu_now() -> float:
    return time.process_time() + jvm_cpu_seconds()


def warm_runs(pristine: Path, master: str, retention: str, runs: int) -> list[tuple[float, float, bool]]:
    """(wall, CPU seconds, whether it wrote hours too) of ``runs`` one-minute incremental runs on
    one warm SparkSession, in the stats dir the last measured run left (rolled up), after
    WARM_UP_RUNS unmeasured ones."""
    from nsqadmin.history.rollup_job import COARSER_EVERY, run_rollup
    from nsqadmin.history.spark_session import SessionOnDemand

    work = pristine.parent / "run" / "stats"
    session = SessionOnDemand(master)
    keep = timedelta(hours=int(retention.rstrip("h")))
    measured = []
    try:
        for number in range(WARM_UP_RUNS + runs):
            _, appended = append_minute(work)
            wall, cpu = time.perf_counter(), cpu_now()
            now = newest_snapshot(work)[1] + NOW_AFTER_NEWEST  # the clock of a recorder that just wrote it
            summary = run_rollup(work, session, now=now, retention=keep, coarser_every=COARSER_EVERY)
            wall, cpu = time.perf_counter() - wall, cpu_now() - cpu
            label = "warm-up" if number < WARM_UP_RUNS else "measured"
            print(f"warm worker run {number + 1} ({label}): +{appended:,} rows, {wall:.2f} s wall, {cpu:.2f} CPU s; "
                  f"{summary.line()}", flush=True)
            if number >= WARM_UP_RUNS:
                measured.append((wall, cpu, summary.windows["1h"] > 0))
    finally:
        session.stop()
    return measured


def duckdb_rollup(pristine: Path) -> tuple[float, float]:
    """(wall, CPU seconds) of DuckDB computing every level from the pristine raw files, 2 threads."""
    import duckdb

    from tests.history_oracle import compute

    db = duckdb.connect()
    db.execute("SET threads = 2")
    wall, cpu = time.perf_counter(), time.process_time()
    compute(db, layout.visible_files(layout.raw_dir(pristine)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    db.close()
    return wall, cpu


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/tmp/nsq-rollup-bench"),
                        help="where the generated snapshots are kept between invocations")
    parser.add_argument("--runs", type=positive, default=3)
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--layout", choices=("compacted", "flushes"), default="compacted",
                        help="raw files as compaction leaves closed hours, or as the recorder flushes them")
    parser.add_argument("--nodes", type=positive, default=10)
    parser.add_argument("--channels", type=positive, default=200)
    parser.add_argument("--topics", type=positive, default=20)
    parser.add_argument("--hours", type=positive, default=24)
    parser.add_argument("--warm-runs", type=int, default=10, help="measured incremental runs in a warm session")
    parser.add_argument("--no-duckdb", action="store_true", help="skip DuckDB's rollup of the same files")
    args = parser.parse_args()
    if args.topics > args.channels:
        parser.error(f"--topics ({args.topics}) must not exceed --channels ({args.channels})")
    if not (Path(sys.executable).parent / "nsqadmin-rollup").exists():
        parser.exit(1, f"bench_rollup: no nsqadmin-rollup beside {sys.executable}: run with the project's .venv\n")
    become_subreaper()
    pristine, rows = prepared_data(args.data, ClusterShape(args.nodes, args.channels, args.topics), args.hours,
                                   args.layout == "flushes")
    retention = retention_keeping()
    missing = missing_class_archives()
    if missing:
        print(f"warm-up (not counted): no class archive yet ({', '.join(path.name for path in missing)})", flush=True)
        bench_run("warm-up", pristine, rows, args.spark_master, retention)
    runs = [bench_run(f"run {number}", pristine, rows, args.spark_master, retention)
            for number in range(1, args.runs + 1)]
    report(rows, [full for full, _ in runs], [incremental for _, incremental in runs])
    if args.warm_runs:
        warm = warm_runs(pristine, args.spark_master, retention, args.warm_runs)
        minutes_only = [(wall, cpu) for wall, cpu, coarser in warm if not coarser]
        cpu = statistics.median(run[1] for run in minutes_only)
        print(f"median warm incremental: {spread([run[0] for run in minutes_only], 's wall')}, "
              f"{spread([run[1] for run in minutes_only], 'CPU s')} (target < {WARM_INCREMENTAL_CPU_TARGET:g} CPU s: "
              f"{verdict(cpu < WARM_INCREMENTAL_CPU_TARGET)})")
        for wall, cpu, _ in (run for run in warm if run[2]):
            print(f"median warm incremental writing the hours and days too: {wall:.1f} s wall, {cpu:.1f} CPU s")
        print(f"median warm incremental, every measured run: {statistics.mean(run[1] for run in warm):.2f} CPU s "
              f"a minute on average")
    if not args.no_duckdb:
        wall, cpu = duckdb_rollup(pristine)
        spark_wall = statistics.median(full.wall for full, _ in runs)
        spark_cpu = statistics.median(full.cpu for full, _ in runs)
        print(f"median duckdb: {wall:.1f} s wall, {cpu:.1f} CPU s: {rows / wall:,.0f} raw rows/s; Spark's full run "
              f"takes {spark_wall / wall:.1f}x its wall time and {spark_cpu / cpu:.1f}x its CPU "
              f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
