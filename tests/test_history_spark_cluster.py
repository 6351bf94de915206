"""The rollup job on a real standalone Spark cluster (master and worker on loopback) writes exactly
what it writes in local mode."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from bench.history_data import ClusterShape, generate, retention_keeping
from nsqadmin.history import layout

from .spark_cluster import spark_cluster

SHAPE = ClusterShape(nodes=2, channels=3, topics=2)
HOURS = 2
ROLLUP = Path(sys.executable).parent / "nsqadmin-rollup"
KEYS = [(column, "ascending") for column in ("ts", "node", "topic", "channel")]
JOB_TIMEOUT = 300


def start_rollup(stats_dir: Path, master: str) -> subprocess.Popen:
    """The job, its executors running this Python as a cluster's operator would set it."""
    return subprocess.Popen([str(ROLLUP), "--stats-dir", str(stats_dir), "--spark-master", master,
                             "--stats-retention", retention_keeping()],
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(job: subprocess.Popen) -> str:
    output = job.communicate(timeout=JOB_TIMEOUT)[0]
    assert job.returncode == 0, output
    return output


def rollup_files(stats_dir: Path) -> list[Path]:
    rollups = layout.rollups_dir(stats_dir)
    return [path.relative_to(rollups) for path in layout.visible_files(rollups)]


def health_without_time(stats_dir: Path) -> dict:
    document = json.loads((layout.rollups_dir(stats_dir) / layout.HEALTH_FILE).read_text())
    del document["generated"]
    return document


def test_rollup_on_a_standalone_cluster_equals_local_mode(tmp_path):
    local, clustered = tmp_path / "local", tmp_path / "cluster"
    generate(local, SHAPE, HOURS)
    shutil.copytree(local, clustered)
    local_job = start_rollup(local, "local[2]")  # runs while the cluster starts
    with spark_cluster(tmp_path / "spark") as master:
        finish(start_rollup(clustered, master))
    finish(local_job)

    assert list((tmp_path / "spark" / "work").glob("app-*/*/stderr")), "no executor ran on the worker"
    files = rollup_files(clustered)
    assert files == rollup_files(local)
    assert sorted(str(path.parent) for path in files) == [
        "1d/month=2026-01", "1h/date=2026-01-01", "1m/date=2026-01-01/hour=00", "1m/date=2026-01-01/hour=01"]
    minute_rows = 0
    for path in files:
        on_cluster = pq.read_table(layout.rollups_dir(clustered) / path)
        in_local_mode = pq.read_table(layout.rollups_dir(local) / path)
        assert on_cluster.schema == layout.ROLLUP_SCHEMA
        assert on_cluster.sort_by(KEYS).equals(in_local_mode.sort_by(KEYS)), path
        minute_rows += on_cluster.num_rows if path.parts[0] == "1m" else 0
    assert minute_rows == HOURS * 60 * (SHAPE.nodes + 1) * (SHAPE.channels + SHAPE.topics)
    health = health_without_time(clustered)
    assert len(health["channels"]) == SHAPE.channels
    assert health == health_without_time(local)
