"""Rollup files written by hand, in layout.py's schema and places: known windows for the readers' tests."""

from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nsqadmin.history import layout

DEFAULTS = {"samples": 6, "covered_seconds": 60.0, "messages": 0, "rate": 0.0, "requeues": 0, "timeouts": 0,
            "finished": 0, "depth_max": 0, "depth_avg": 0.0, "depth_p95": 0.0, "depth_last": 0,
            "in_flight_max": 0, "in_flight_last": 0, "clients_max": 0, "clients_last": 0, "e2e_p99_max": None,
            "paused_last": False}


def utc(unix_seconds: int) -> datetime:
    return datetime.fromtimestamp(unix_seconds, timezone.utc)


def window_row(ts: int, topic: str, channel: str = "", node: str = layout.ALL_NODES, **values) -> dict:
    """A rollup row starting at unix second ``ts``; unnamed columns take quiet defaults."""
    unknown = set(values) - set(DEFAULTS)
    assert not unknown, f"not rollup columns: {unknown}"
    return {"ts": utc(ts), "node": node, "topic": topic, "channel": channel, **DEFAULTS, **values}


def write_rollups(stats_dir: Path, window: str, rows: list[dict]) -> list[Path]:
    """Each row into the partition file layout.py names for it (replacing what was there)."""
    by_file = defaultdict(list)
    for row in rows:
        by_file[layout.rollup_partition(stats_dir, window, row["ts"])].append(row)
    for path, partition in by_file.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(partition, schema=layout.ROLLUP_SCHEMA), path)
    return sorted(by_file)
