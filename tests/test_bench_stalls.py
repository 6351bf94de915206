"""The stall benchmark (bench/bench_stalls.py) --quick: every operation runs once on NSQ's nsqd and
ours beside the steady publisher, and its table agrees with its log. A smoke test, so the harness
behind the README's stall table cannot rot; and its rounds' round trips are pooled, not their
figures' medians taken."""

import re
import subprocess
import sys

import pytest

from bench.bench_stalls import figures, pooled

from .go_nsq import requires_go
from .helpers import ROOT

KEYS = ("idle", "create", "stats", "stats_json", "metrics", "nsqd_dat", "delete", "empty", "tls", "gc")
LOGGED = re.compile(r"^(\w+) round 1, (Go|ours): p50 ([\d.]+), p99 ([\d.]+), p99\.9 ([\d.]+), max ([\d.]+) ms "
                    r"\((\d+) PUBs\)", re.M)


def test_the_rounds_are_pooled_so_a_hiccup_in_each_of_two_rounds_is_four_trips_among_all():
    calm = [0.1] * 1998 + [0.2, 0.3]
    hiccup = [0.1] * 1998 + [8.0, 9.0]
    rounds = [figures(hiccup), figures(calm), figures(hiccup)]
    assert [round["p99.9"] for round in rounds] == [8.0, 0.2, 8.0]  # a median of these would be 8.0
    assert pooled(rounds) == [0.1, 0.1, 0.2, 9.0]  # p99.9 the sixth-worst of 6,000; max the worst


@pytest.fixture(scope="module")
def run() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/bench_stalls.py", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def logged(run) -> dict[tuple[str, str], list[float]]:
    return {(key, daemon): [float(value) for value in values]
            for key, daemon, *values in LOGGED.findall(run.stderr)}


@requires_go
def test_every_operation_runs_on_each_daemon_with_the_publisher_beside_it(run):
    assert run.returncode == 0, run.stderr
    found = logged(run)
    for key in KEYS:
        daemons = ("ours",) if key == "metrics" else ("Go", "ours")
        for daemon in daemons:
            *percentiles, count = found[(key, daemon)]
            assert count > 0, (key, daemon)
            assert percentiles == sorted(percentiles), (key, daemon, percentiles)
    assert ("metrics", "Go") not in found


@requires_go
def test_the_table_gives_each_operations_figures_and_ratios(run):
    assert run.stdout.startswith("`python bench/bench_stalls.py --quick`, ")
    rows = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in run.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| operation")]
    assert len(rows) == len(KEYS), run.stdout
    found = logged(run)
    for key, (title, go, ours, ratio) in zip(KEYS, rows):
        assert [float(value) for value in ours.split(" / ")] == pytest.approx(found[(key, "ours")][:4], abs=0.006), title
        if key == "metrics":
            assert (go, ratio) == ("-", "-"), title
            continue
        go_values = [float(value) for value in go.split(" / ")]
        assert go_values == pytest.approx(found[(key, "Go")][:4], abs=0.006), title
        our_values = [float(value) for value in ours.split(" / ")]
        for value, mine, theirs in zip(ratio.split(" / "), our_values, go_values, strict=True):
            # the table's figures are rounded to 0.01 ms; the ratio is of the figures unrounded
            low, high = (mine - 0.005) / (theirs + 0.005), (mine + 0.005) / max(theirs - 0.005, 1e-9)
            assert low - 0.01 <= float(value) <= high + 0.01, (title, value, mine, theirs)
