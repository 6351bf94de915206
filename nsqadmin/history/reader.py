"""What the pages and the JSON API read of the rollups: series of windows, newest values, health.

Reads the files of layout.py with pyarrow, never Spark: a page must answer in milliseconds. Only
the partitions that can hold windows at or after ``since`` are opened, and rows are filtered by
the Parquet reader. Every read is a blocking call; the web process runs it in a worker thread.
"""

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import layout

# The keys of a window in /api/rollups, in this order (ts first, as unix seconds).
SERIES_FIELDS = ("messages", "rate", "depth_max", "depth_avg", "depth_p95", "in_flight_max", "requeues",
                 "timeouts", "clients_max", "finished", "e2e_p99_max")
# How recent a 1-minute window must be to count as a series' current value.
FRESH_SECONDS = 180
_PARTITION_SPAN = {"1m": timedelta(hours=1), "1h": timedelta(days=1)}


def _partition_start(window: str, path: Path) -> datetime:
    """The start of the period a rollup file covers, from its directory names."""
    keys = dict(part.split("=", 1) for part in path.parent.parts if "=" in part)
    if window == "1m":
        return datetime.strptime(f"{keys['date']} {keys['hour']}", "%Y-%m-%d %H").replace(tzinfo=timezone.utc)
    if window == "1h":
        return datetime.strptime(keys["date"], "%Y-%m-%d").replace(tzinfo=timezone.utc)
    return datetime.strptime(keys["month"], "%Y-%m").replace(tzinfo=timezone.utc)


def _partition_end(window: str, start: datetime) -> datetime:
    if window in _PARTITION_SPAN:
        return start + _PARTITION_SPAN[window]
    return (start + timedelta(days=32)).replace(day=1)


def _unix(ts: datetime) -> int:
    return int(ts.timestamp())


def _value(value):
    """A column value as JSON writes it: floats that are whole stay floats, NaN becomes null."""
    if isinstance(value, float) and value != value:
        return None
    return value


class History:
    """The rollups under one ``--stats-dir``."""

    def __init__(self, stats_dir: str | Path):
        self.stats_dir = Path(stats_dir)

    def _files(self, window: str, since: datetime | None) -> list[Path]:
        files = layout.visible_files(layout.rollups_dir(self.stats_dir) / window)
        if since is None:
            return files
        return [path for path in files if _partition_end(window, _partition_start(window, path)) > since]

    def _read(self, window: str, since: datetime | None, filters: list) -> pa.Table:
        tables = [pq.read_table(path, filters=filters or None, schema=layout.ROLLUP_SCHEMA)
                  for path in self._files(window, since)]
        table = pa.concat_tables(tables) if tables else layout.ROLLUP_SCHEMA.empty_table()
        if since is not None:
            table = table.filter(pc.greater_equal(table["ts"], pa.scalar(since, layout.ROLLUP_SCHEMA.field("ts").type)))
        return table.sort_by("ts")

    def series(self, window: str, topic: str, channel: str = "", node: str = layout.ALL_NODES,
               since: datetime | None = None) -> list[dict]:
        """The windows of one topic (``channel`` "") or channel on one node, or summed across
        nodes (``node`` ALL_NODES), oldest first, each as /api/rollups shows it."""
        table = self._read(window, since, [("node", "=", node), ("topic", "=", topic), ("channel", "=", channel)])
        return _rows(table)

    def topic_series(self, window: str, topic: str, since: datetime | None = None) -> list[dict]:
        """A topic's totals per window across nodes: its publish rate, the depth of the topic and
        its channels together, the in-flight messages of its channels."""
        table = self._read(window, since, [("node", "=", layout.ALL_NODES), ("topic", "=", topic)])
        return _summed(table)

    def node_series(self, window: str, node: str, since: datetime | None = None) -> list[dict]:
        """One nsqd's totals per window: the rate published to its topics, the depth of its topics
        and channels together, the in-flight messages of its channels."""
        table = self._read(window, since, [("node", "=", node)])
        return _summed(table)

    def cluster_series(self, window: str, since: datetime | None = None) -> list[dict]:
        """The cluster's totals per window: messages into every channel (NSQ's counter), depths."""
        table = self._read(window, since, [("node", "=", layout.ALL_NODES), ("channel", "!=", "")])
        return _summed(table, topic_rate=False)

    def current(self, now: datetime) -> dict[tuple[str, str], dict]:
        """The newest 1-minute window of every (topic, channel) across nodes, if recent."""
        since = now - timedelta(seconds=FRESH_SECONDS)
        table = self._read("1m", since, [("node", "=", layout.ALL_NODES)])
        return {(row["topic"], row["channel"]): row for row in table.to_pylist()}

    def health(self) -> dict | None:
        """health.json as the last rollup run wrote it, or None before the first run."""
        try:
            return json.loads((layout.rollups_dir(self.stats_dir) / layout.HEALTH_FILE).read_text())
        except (FileNotFoundError, ValueError):
            return None


def _rows(table: pa.Table) -> list[dict]:
    out = []
    for row in table.select(["ts", *SERIES_FIELDS]).to_pylist():
        point = {"ts": _unix(row.pop("ts"))}
        point.update((key, _value(value)) for key, value in row.items())
        out.append(point)
    return out


def _summed(table: pa.Table, topic_rate: bool = True) -> list[dict]:
    """Windows of many series added up per window start: ``rate`` and ``messages`` from the
    topics' own rows (what was published) when ``topic_rate``, else from every row."""
    by_ts: dict[int, dict] = {}
    for row in table.select(["ts", "channel", "messages", "rate", "depth_max", "in_flight_max"]).to_pylist():
        point = by_ts.setdefault(_unix(row["ts"]), {"ts": _unix(row["ts"]), "messages": 0, "rate": 0.0,
                                                     "depth_max": 0, "in_flight_max": 0})
        if not topic_rate or row["channel"] == "":
            point["messages"] += row["messages"]
            point["rate"] += row["rate"]
        point["depth_max"] += row["depth_max"]
        point["in_flight_max"] += row["in_flight_max"]
    return [by_ts[ts] for ts in sorted(by_ts)]
