"""Snapshots reach the disk within one --stats-interval or 10 s, whatever --rollup-interval is: a real
cluster, nsqadmin recording every second with a rollup only every hour, a publish, nsqadmin killed
with SIGKILL, and then an external ``nsqadmin-rollup`` run that finds the publish in its windows;
the killed nsqadmin's rollup worker goes with it."""

import os
import re
import subprocess
import sys
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq

from nsqadmin.history import layout
from nsqadmin.history.recorder import MIN_FLUSH_SECONDS

from .admin_helpers import Cluster, publish, topic_on, wait_for
from .history_raw import rollups


def recorded_count(stats_dir, topic: str) -> int | None:
    """The largest message_count of ``topic``'s own rows in the raw files on disk (None: no row)."""
    counts = []
    for path in layout.visible_files(layout.raw_dir(stats_dir)):
        table = pq.read_table(path, columns=["topic", "channel", "message_count"])
        rows = table.filter(pc.and_(pc.equal(table["topic"], topic), pc.equal(table["channel"], "")))
        counts += rows["message_count"].to_pylist()
    return max(counts, default=None)


def alive(pid: int) -> bool:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def test_a_snapshot_is_on_disk_within_10_s_and_survives_kill_9_for_an_external_rollup(tmp_path):
    stats_dir = tmp_path / "stats"
    cluster = Cluster(tmp_path, f"--stats-dir={stats_dir}", "--stats-interval=1s", "--rollup-interval=1h",
                      "--spark-master=local[1]")
    try:
        topic_on(cluster, "crash", "", (0,))
        worker = int(wait_for(lambda: re.search(r"rollup: the worker started \(pid (\d+)\)", cluster.admin.log()),
                              timeout=10, what="the rollup worker").group(1))
        wait_for(lambda: recorded_count(stats_dir, "crash") == 0, timeout=MIN_FLUSH_SECONDS + 20,
                 what="the empty topic in a raw file")
        publish(cluster, 0, "crash", 25)
        published = time.monotonic()
        wait_for(lambda: recorded_count(stats_dir, "crash") == 25, timeout=MIN_FLUSH_SECONDS + 20,
                 what="the publish in a raw file")
        on_disk = time.monotonic() - published
        cluster.admin.proc.kill()
        assert cluster.admin.proc.wait(timeout=10) == -9
        wait_for(lambda: not alive(worker), timeout=30, what="the worker gone with its nsqadmin")
        done = subprocess.run([sys.executable, "-m", "nsqadmin.history.rollup_main", f"--stats-dir={stats_dir}",
                               "--spark-master=local[1]"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert re.search(r"read [1-9]\d* raw rows", done.stderr)
        windows = [row for row in rollups(stats_dir, "1m") if row["node"] == layout.ALL_NODES
                   and row["topic"] == "crash" and row["channel"] == ""]
        assert sum(row["messages"] for row in windows) == 25
    finally:
        for process in (*cluster.nsqds, cluster.lookupd):
            process.stop()
    # a poll each second and a write at least every 10 s: a snapshot waits at most ~11 s (plus the
    # writer thread's turn on a loaded machine)
    assert on_disk < MIN_FLUSH_SECONDS + 8
    assert not [name for name in os.listdir(layout.rollups_dir(stats_dir)) if name.startswith(".staging")]
