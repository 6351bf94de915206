"""Where the stats history lives under ``--stats-dir``, and the columns of each file.

Theory of operation. Three writers and readers share one directory tree:

    <stats-dir>/raw/date=YYYY-MM-DD/hour=HH/<name>.parquet        snapshots (nsqadmin's recorder)
    <stats-dir>/rollups/1m/date=YYYY-MM-DD/hour=HH/rollup.parquet  1-minute windows of that hour
    <stats-dir>/rollups/1h/date=YYYY-MM-DD/rollup.parquet          1-hour windows of that day
    <stats-dir>/rollups/1d/month=YYYY-MM/rollup.parquet            1-day windows of that month
    <stats-dir>/rollups/health.json                                 every channel's status
    <stats-dir>/rollups/_state.json                                 the raw files rolled up, the hours to finish
    <stats-dir>/rollups/.lock                                       one rollup run at a time

Every file appears whole or not at all: it is written under a hidden name (a leading
``.``, which Spark, pyarrow and :func:`visible_files` skip) in its final directory,
fsynced, then renamed into place. A rollup partition is replaced the same way, so a
reader that opened the old file keeps reading it.

Raw rows are one per (ts, node, topic, channel) per poll: ``channel`` is ``""`` for the
topic's own row (recorded for every topic, so a topic has a publish rate whether or not
it has channels). A node that did not answer is one row with ``missing`` true and every
other column but ``ts`` and ``node`` null. ``ts`` is the poll's time, the same for every
node of one poll. ``start_time`` is the same on every row of a node's answer.

Rollup rows are one per (window start ``ts``, node, topic, channel); ``node`` is
:data:`ALL_NODES` for the sum across nodes.
"""

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from .windows import ALL_NODES, WINDOWS  # noqa: F401 (ALL_NODES: part of the files' contract)

RAW = "raw"
ROLLUPS = "rollups"
STATE_FILE = "_state.json"
HEALTH_FILE = "health.json"
LOCK_FILE = ".lock"
ROLLUP_FILE = "rollup.parquet"

RAW_SCHEMA = pa.schema([
    ("ts", pa.timestamp("us", tz="UTC")),
    ("node", pa.string()),
    ("topic", pa.string()),
    ("channel", pa.string()),
    ("missing", pa.bool_()),
    ("depth", pa.int64()),
    ("backend_depth", pa.int64()),
    ("in_flight", pa.int64()),
    ("deferred", pa.int64()),
    ("message_count", pa.int64()),
    ("requeue_count", pa.int64()),
    ("timeout_count", pa.int64()),
    ("client_count", pa.int64()),
    ("paused", pa.bool_()),
    # nsqd's e2e processing latency percentiles in ns, keyed by quantile as Go prints it ("0.99")
    ("e2e_ns", pa.map_(pa.string(), pa.float64())),
    # the node's /stats start_time (unix seconds): a new value means nsqd restarted (null in files
    # written before it was recorded)
    ("start_time", pa.int64()),
])

# Counters are summed over a window; gauges are summarised. ``covered_seconds`` is the time the
# window's counter deltas span, so ``rate = messages / covered_seconds`` stays right for a window
# observed only in part (the current minute, a node that came back after a gap).
ROLLUP_SCHEMA = pa.schema([
    ("ts", pa.timestamp("us", tz="UTC")),
    ("node", pa.string()),
    ("topic", pa.string()),
    ("channel", pa.string()),
    ("samples", pa.int64()),
    ("covered_seconds", pa.float64()),
    ("messages", pa.int64()),
    ("rate", pa.float64()),
    ("requeues", pa.int64()),
    ("timeouts", pa.int64()),
    ("finished", pa.int64()),
    ("depth_max", pa.int64()),
    ("depth_avg", pa.float64()),
    ("depth_p95", pa.float64()),
    ("depth_last", pa.int64()),
    ("in_flight_max", pa.int64()),
    ("in_flight_last", pa.int64()),
    ("clients_max", pa.int64()),
    ("clients_last", pa.int64()),
    ("e2e_p99_max", pa.float64()),
    ("paused_last", pa.bool_()),
])


def raw_dir(stats_dir: str | Path) -> Path:
    return Path(stats_dir) / RAW


def rollups_dir(stats_dir: str | Path) -> Path:
    return Path(stats_dir) / ROLLUPS


def raw_partition(stats_dir: str | Path, ts: datetime) -> Path:
    """The raw directory of the UTC hour holding ``ts``."""
    ts = ts.astimezone(timezone.utc)
    return raw_dir(stats_dir) / f"date={ts:%Y-%m-%d}" / f"hour={ts:%H}"


def rollup_partition(stats_dir: str | Path, window: str, ts: datetime) -> Path:
    """The file holding ``window``'s rows for the window starting at ``ts``: 1m rows by hour,
    1h rows by day, 1d rows by month."""
    ts = ts.astimezone(timezone.utc)
    base = rollups_dir(stats_dir) / window
    if window == "1m":
        return base / f"date={ts:%Y-%m-%d}" / f"hour={ts:%H}" / ROLLUP_FILE
    if window == "1h":
        return base / f"date={ts:%Y-%m-%d}" / ROLLUP_FILE
    if window == "1d":
        return base / f"month={ts:%Y-%m}" / ROLLUP_FILE
    raise ValueError(f"unknown window {window!r}: use one of {', '.join(WINDOWS)}")


def visible_files(directory: Path, suffix: str = ".parquet") -> list[Path]:
    """The finished files under ``directory`` (hidden names are files still being written)."""
    if not directory.is_dir():
        return []
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found.extend(Path(root) / name for name in sorted(files)
                     if name.endswith(suffix) and not name.startswith((".", "_")))
    return found


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hidden_twin(path: Path) -> Path:
    """Where ``path`` is written before it is published: the same directory, a hidden name."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def publish(temporary: Path, final: Path) -> None:
    """Make a fully written hidden file visible under its final name, atomically and durably."""
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, final)
    _fsync_dir(final.parent)


def write_json(path: Path, document) -> None:
    """Replace a small JSON file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = hidden_twin(path)
    temporary.write_text(json.dumps(document, separators=(",", ":")))
    publish(temporary, path)
