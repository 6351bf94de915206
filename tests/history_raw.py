"""Raw snapshots written by hand, in layout.py's schema and places: known input for the rollup job."""

import shutil
import uuid
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nsqadmin.history import layout

T0 = 1_795_075_200  # 2026-11-19 08:00:00 UTC, an hour boundary


def utc(unix_seconds: int) -> datetime:
    return datetime.fromtimestamp(unix_seconds, timezone.utc)


def snapshot(ts: int, node: str, topic: str, channel: str = "", *, messages: int = 0, depth: int = 0,
             in_flight: int = 0, deferred: int = 0, requeues: int = 0, timeouts: int = 0, clients: int = 1,
             paused: bool = False, e2e_p99: float | None = None) -> dict:
    return {"ts": utc(ts), "node": node, "topic": topic, "channel": channel, "missing": False, "depth": depth,
            "backend_depth": 0, "in_flight": in_flight, "deferred": deferred, "message_count": messages,
            "requeue_count": requeues, "timeout_count": timeouts, "client_count": clients, "paused": paused,
            "e2e_ns": {} if e2e_p99 is None else {"0.99": e2e_p99}}


def missing(ts: int, node: str) -> dict:
    row = dict.fromkeys(layout.RAW_SCHEMA.names)
    row.update(ts=utc(ts), node=node, missing=True)
    return row


def write_raw(stats_dir: Path, rows: list[dict]) -> list[Path]:
    """The rows as one new file per UTC hour, named as the recorder names its files."""
    by_hour = defaultdict(list)
    for row in rows:
        by_hour[layout.raw_partition(stats_dir, row["ts"])].append(row)
    written = []
    for directory, hour_rows in sorted(by_hour.items()):
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{hour_rows[0]['ts']:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}.parquet"
        pq.write_table(pa.Table.from_pylist(hour_rows, schema=layout.RAW_SCHEMA), path)
        written.append(path)
    return written


def rollups(stats_dir: Path, window: str) -> list[dict]:
    """Every rollup row of a level, in a stable order, with ts as unix seconds."""
    rows = []
    for path in layout.visible_files(layout.rollups_dir(stats_dir) / window):
        table = pq.read_table(path, schema=layout.ROLLUP_SCHEMA)
        assert pq.read_schema(path).remove_metadata() == layout.ROLLUP_SCHEMA, path
        rows.extend(table.to_pylist())
    for row in rows:
        row["ts"] = int(row["ts"].timestamp())
    return sorted(rows, key=lambda row: (row["node"], row["topic"], row["channel"], row["ts"]))


def window(rows: list[dict], node: str, topic: str, channel: str, ts: int) -> dict:
    found = [row for row in rows if (row["node"], row["topic"], row["channel"], row["ts"]) == (node, topic, channel, ts)]
    assert len(found) == 1, (node, topic, channel, ts, found)
    return found[0]


def copy_raw(source: Path, target: Path) -> None:
    """The visible raw files of one stats dir into a fresh one (for a full run to compare with)."""
    shutil.copytree(layout.raw_dir(source), layout.raw_dir(target),
                    ignore=lambda directory, names: [name for name in names if name.startswith(".")])
