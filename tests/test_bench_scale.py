"""The memory-and-idle-CPU benchmark (bench/bench_scale.py) in its --quick scene, against NSQ's nsqd
and ours: both rounds run, the table parses, and its ratios agree with its figures. A smoke test, so
the harness behind the README's memory table cannot rot."""

import re
import subprocess
import sys

import pytest

from .go_nsq import requires_go
from .helpers import ROOT

pytestmark = requires_go

FIGURES = ("RSS, MiB", "PSS, MiB", "idle CPU, % of a core", "idle wake-ups, per s", "baseline RSS, MiB",
           "RSS per idle topic or channel, B", "RSS per queued message, B", "RSS per idle consumer, B")


@pytest.fixture(scope="module")
def run() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/bench_scale.py", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def table(stdout: str) -> dict[str, list[str]]:
    rows = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| figure ")]
    return {row[0]: row[1:] for row in rows}


def test_each_daemon_sets_the_scene_once(run):
    assert run.returncode == 0, run.stderr
    for name in ("Go", "ours"):
        assert re.search(rf"^round 1, {name}: RSS [\d.]+ MiB, PSS [\d.]+ MiB, idle CPU [\d.]+% of a core",
                         run.stderr, re.M), run.stderr


def test_the_table_gives_every_figure_on_both_and_the_ratio(run):
    assert run.stdout.startswith("`python bench/bench_scale.py --quick` on 1 round(s), load average "), run.stdout
    assert "20,000 queued 200-byte messages in 2 topics (`--mem-queue-size=10000`), 200 idle topics x 2 channels, 100 idle consumers" in run.stdout
    rows = table(run.stdout)
    assert list(rows) == list(FIGURES), run.stdout
    for figure, (go, ours, ratio) in rows.items():
        go_value, our_value = float(go.replace(",", "")), float(ours.replace(",", ""))
        if figure.startswith("idle "):
            assert go_value >= 0 and our_value >= 0
            continue
        assert go_value > 0 and our_value > 0, figure
        assert float(ratio) == pytest.approx(our_value / go_value, rel=0.02, abs=0.01), figure
    # every message is held in memory by both: the step adds megabytes (its bodies alone are 4 MB)
    assert float(rows["RSS per queued message, B"][0]) > 100
    assert float(rows["RSS per queued message, B"][1]) > 100
