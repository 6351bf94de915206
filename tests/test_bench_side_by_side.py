"""The side-by-side benchmark (bench/side_by_side.py): every load, ~1 s, against NSQ's nsqd and ours,
with NSQ's own bench_writer and bench_reader; its tables parse and agree with its log. A smoke
test, so the harness that makes the README's headline figures cannot rot."""

import re
import subprocess
import sys

import pytest

from bench.loads import nsq_tool_loads, replica_loads

from .go_nsq import requires_go
from .helpers import ROOT

pytestmark = requires_go

FIGURE = r"([\d,.]+)(k| ms)?"


def number(text: str) -> float:
    """A figure as the tables print it: 1,091k, 57.4k, 812, 0.57 ms."""
    match = re.fullmatch(FIGURE, text)
    assert match, text
    return float(match.group(1).replace(",", "")) * (1000 if match.group(2) == "k" else 1)


def table_rows(block: str) -> list[list[str]]:
    """The cells of every row of the block's Markdown tables, header and rule left out."""
    rows = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in block.splitlines()
            if line.startswith("| ")]
    return [row for row in rows if not row[0].startswith("load:")]


@pytest.fixture(scope="module")
def run() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/side_by_side.py", "--runs=1", "--runfor=1s", "--channels=2",
                           "--consumers=2"], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_every_load_runs_once_on_each_daemon(run):
    assert run.returncode == 0, run.stderr
    keys = [load.key for load in (*nsq_tool_loads("1s", 2, 2), *replica_loads("1s"))]
    for key in keys:
        assert re.search(rf"^{key} round 1, Go: ", run.stderr, re.M), run.stderr
        assert re.search(rf"^{key} round 1, ours: ", run.stderr, re.M), run.stderr
    assert len(table_rows(run.stdout)) == len(keys), run.stdout


def test_the_tables_give_both_figures_their_ratio_and_both_cpus(run):
    assert run.stdout.startswith("`python bench/side_by_side.py --runs=1 --runfor=1s --channels=2 --consumers=2` on ")
    for title, go, ours, ratios, cpu, clients in table_rows(run.stdout):
        assert re.search(r": `nsqd[^`]*`; ", title), title
        legs = list(zip(go.split(" / "), ours.split(" / "), ratios.split(" / "), strict=True))
        for go_figure, our_figure, ratio in legs:
            assert number(go_figure) > 0 and number(our_figure) > 0, title
            assert float(ratio) == pytest.approx(number(our_figure) / number(go_figure), rel=0.03, abs=0.02), title
        go_cpu, our_cpu = (float(value) for value in cpu.split(" / "))
        assert go_cpu > 0 and our_cpu > 0, title
        assert clients == "-" or all(float(value) > 0 for value in clients.split(" / ")), title


def test_the_remarks_give_the_drains_backlogs_and_the_latency_percentiles(run):
    assert re.search(r"^- drain, the backlog, messages: Go [\d,]+.*; ours [\d,]+", run.stdout, re.M), run.stdout
    latencies = r"[\d.e+-]+ / [\d.e+-]+ / [\d.e+-]+"
    assert re.search(rf"^- latency, p50 / p99.9 / max, ms: Go {latencies}; ours {latencies}$", run.stdout, re.M), \
        run.stdout
