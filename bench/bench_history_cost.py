"""What keeping the stats history running costs: nsqadmin (recording) and its rollup worker (Spark),
measured from outside over a quiet cluster.

    python bench/bench_history_cost.py [--minutes=10] [--nodes=10] [--topics=20] [--channels=10]
                                       [--data=/tmp/nsq-history-cost] [-- extra nsqadmin flags]

Starts bench/fake_stats_cluster.py --live (N nsqd answering /stats with counters that move on
at every poll, topics x channels each, behind one nsqlookupd) and a real nsqadmin with default
settings (--stats-interval 10s, --rollup-interval 5m, --spark-master local[*]) recording it into
a fresh --stats-dir. Once the worker has rolled up a first minute with snapshots in it, this
samples every process of nsqadmin's tree (nsqadmin, the worker, the worker's JVM) from /proc once
a second for --minutes: CPU seconds (utime + stime, of processes alive at any sample; a process
that starts later counts from zero), RSS, and the rollup runs the worker logged. Prints the CPU
per process and in all as a share of one core, the largest RSS of each, and the load average.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
TARGET_PERCENT = 3.0
FIRST_RUN = re.compile(r"rollup: read [1-9]\d* raw rows")
RUN = re.compile(r"rollup: read (\d+) raw rows from (\d+) files, wrote (\d+) windows .* in ([\d.]+) s")


def children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children(current))
    return out


def sample(pid: int) -> tuple[str, float, int] | None:
    """(kind, CPU seconds, RSS bytes) of a live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    rss = int(fields[21]) * PAGE
    name = command[0].decode(errors="replace").rsplit("/", 1)[-1]
    text = b" ".join(command).decode(errors="replace")
    kind = "JVM" if name == "java" else "worker" if "rollup_main" in text else "nsqadmin" if "nsqadmin" in text else name
    return kind, cpu, rss


class Log:
    """nsqadmin's stderr, kept (and its lines counted) as it comes."""

    def __init__(self, stream, path: Path):
        self.lines: list[str] = []
        self._out = open(path, "w")
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)
            self._out.write(line)
            self._out.flush()

    def text(self) -> str:
        return "".join(self.lines)


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_history_cost: {what} not within {timeout:.0f} s")
        time.sleep(0.5)
    return result


def measure(admin_pid: int, seconds: float) -> tuple[dict, dict, float]:
    """CPU seconds and largest RSS per kind of process over ``seconds``, and the wall time."""
    first: dict[int, float] = {}
    last: dict[int, tuple[str, float]] = {}
    peak: dict[str, int] = {}
    began = time.monotonic()
    starting = True
    while time.monotonic() - began < seconds:
        rss_now: dict[str, int] = {}
        for pid in tree(admin_pid):
            found = sample(pid)
            if found is None:
                continue
            kind, cpu, rss = found
            first.setdefault(pid, cpu if starting else 0.0)  # a process started since counts from 0
            last[pid] = (kind, cpu)
            rss_now[kind] = rss_now.get(kind, 0) + rss
        for kind, rss in rss_now.items():
            peak[kind] = max(peak.get(kind, 0), rss)
        starting = False
        time.sleep(1.0)
    wall = time.monotonic() - began
    cpu: dict[str, float] = {}
    for pid, (kind, seconds_used) in last.items():
        cpu[kind] = cpu.get(kind, 0.0) + seconds_used - first.get(pid, 0.0)
    return cpu, peak, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--channels", type=int, default=10, help="per topic")
    parser.add_argument("--data", type=Path, default=Path("/tmp/nsq-history-cost"))
    parser.add_argument("extra", nargs="*", help="more nsqadmin flags (after --)")
    args = parser.parse_args()
    shutil.rmtree(args.data, ignore_errors=True)
    args.data.mkdir(parents=True)
    fake = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fake_stats_cluster.py"), f"--nodes={args.nodes}",
                             f"--topics={args.topics}", f"--channels={args.channels}", "--clients=0", "--live"],
                            stdout=subprocess.PIPE, text=True)
    ports = json.loads(fake.stdout.readline())
    admin = subprocess.Popen([sys.executable, "-m", "nsqadmin", "--http-address=127.0.0.1:0",
                              f"--lookupd-http-address=127.0.0.1:{ports['lookupd']}",
                              f"--stats-dir={args.data / 'stats'}", *args.extra],
                             cwd=ROOT, stderr=subprocess.PIPE, text=True)
    log = Log(admin.stderr, args.data / "nsqadmin.log")
    try:
        print(f"cluster: {args.nodes} nsqd x {args.topics * args.channels} channels over {args.topics} topics; "
              f"nsqadmin {' '.join(args.extra) or 'with default settings'}", flush=True)
        wait_for(lambda: FIRST_RUN.search(log.text()), 900, "a first rollup run with snapshots")  # the second run, at 5 minutes
        runs_before = len(RUN.findall(log.text()))
        load_before = os.getloadavg()
        print(f"warm: measuring for {args.minutes:g} minutes (load average {load_before[0]:.1f})", flush=True)
        cpu, peak, wall = measure(admin.pid, args.minutes * 60)
        runs = RUN.findall(log.text())[runs_before:]
        load_after = os.getloadavg()
    finally:
        admin.send_signal(signal.SIGTERM)
        status = admin.wait(timeout=60)
        fake.kill()
        fake.wait()
    total = sum(cpu.values())
    percent = 100 * total / wall
    for kind in sorted(cpu):
        print(f"  {kind}: {cpu[kind]:.2f} CPU s ({100 * cpu[kind] / wall:.2f}% of a core), "
              f"largest RSS {peak.get(kind, 0) / 2**20:,.0f} MiB")
    run_seconds = [float(run[3]) for run in runs]
    if runs:
        rows = sorted(int(run[0]) for run in runs)
        print(f"  {len(runs)} rollup runs: raw rows {rows[0]:,}-{rows[-1]:,}, "
              f"{min(run_seconds):.1f}-{max(run_seconds):.1f} s each")
    print(f"  memory: largest RSS of nsqadmin's whole tree {sum(peak.values()) / 2**20:,.0f} MiB")
    print(f"total: {total:.1f} CPU s in {wall:.0f} s = {percent:.2f}% of one core (target < {TARGET_PERCENT:g}%: "
          f"{'met' if percent < TARGET_PERCENT else 'NOT met'}); load average {load_before[0]:.1f} -> "
          f"{load_after[0]:.1f}; nsqadmin exited {status}")


if __name__ == "__main__":
    main()
