"""rollups/health.json: every channel's status from its newest across-nodes 1-minute windows.

The windows judged are those of the last :data:`health.HEALTH_WINDOWS` minutes that have any
rollup row (the newest minute may still be filling up), read with pyarrow from the newest 1m
partitions; a channel with no window in those minutes is gone and not reported.
"""

from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import layout
from .health import HEALTH_WINDOWS, channel_health
from .partitions import period_start

# The newest partitions hold the last HEALTH_WINDOWS minutes: an hour each, so two suffice.
PARTITIONS_READ = 2


def newest_windows(stats_dir) -> list[dict]:
    """The ALL_NODES 1m rows of channels in the last HEALTH_WINDOWS minutes, oldest first."""
    base = layout.rollups_dir(stats_dir) / "1m"
    files = sorted(layout.visible_files(base), key=lambda path: period_start("1m", path.relative_to(base)))
    filters = [("node", "=", layout.ALL_NODES), ("channel", "!=", "")]
    tables = [pq.read_table(path, filters=filters, schema=layout.ROLLUP_SCHEMA) for path in files[-PARTITIONS_READ:]]
    if not tables:
        return []
    table = pa.concat_tables(tables)
    if table.num_rows == 0:
        return []
    newest = pc.max(table["ts"]).as_py()
    recent = table.filter(pc.greater(table["ts"], pa.scalar(newest - timedelta(minutes=HEALTH_WINDOWS),
                                                            table.schema.field("ts").type)))
    return recent.sort_by([("topic", "ascending"), ("channel", "ascending"), ("ts", "ascending")]).to_pylist()


def channel_reports(windows: list[dict]) -> list[dict]:
    """One entry per (topic, channel) of ``windows`` (sorted by topic, channel, ts)."""
    by_channel: dict[tuple[str, str], list[dict]] = {}
    for window in windows:
        by_channel.setdefault((window["topic"], window["channel"]), []).append(window)
    reports = []
    for (topic, channel), series in by_channel.items():
        status, reason = channel_health(series)
        last = series[-1]
        reports.append({"topic": topic, "channel": channel, "status": status, "reason": reason,
                        "depth": last["depth_last"], "rate": last["rate"], "clients": last["clients_last"],
                        "ts": int(last["ts"].timestamp())})
    return reports


def write_health(stats_dir, now: datetime) -> None:
    layout.write_json(layout.rollups_dir(stats_dir) / layout.HEALTH_FILE,
                      {"generated": int(now.timestamp()), "channels": channel_reports(newest_windows(stats_dir))})
