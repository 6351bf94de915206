"""The idle-heartbeat benchmark (bench/bench_idle_heartbeats.py) on a tiny scene: it runs, every
consumer stays connected, and it prints the cost per heartbeat. A smoke test, so the
harness behind the README's idle-CPU figures cannot rot."""

import re
import subprocess
import sys

from .helpers import ROOT


def test_a_round_prints_the_cost_per_heartbeat():
    run = subprocess.run([sys.executable, "bench/bench_idle_heartbeats.py", "--consumers=20", "--heartbeat-interval=1s",
                          "--window=2s", "--rounds=1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("20 idle consumers, heartbeat 1s, window 2s, 1 round(s), load "), run.stdout
    match = re.search(r"this: ([\d.]+) CPU s per 1,000 heartbeats, ([\d.]+)% of a core", run.stdout)
    assert match and float(match.group(1)) >= 0, run.stdout
