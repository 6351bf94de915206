"""Each series' last snapshot before each rewritten span, read on the driver with pyarrow.

Theory of operation. A rewritten span's first counter deltas need every series' snapshot just
before the span (touched.py: at most MAX_DELTA_GAP earlier), and of that snapshot only its
time, counters, backlog and nsqd's start_time (rollup_job._with_deltas); the look-back's own
minutes are not rewritten. A one-minute run's look-back is 15 minutes of snapshots, fifteen
times its new rows: read by Spark it was a Parquet scan, a shuffle and a Spark job of their
own, a fifth of a warm run's CPU, to leave one row a series. pyarrow reads the same rows
here, with the row groups outside the look-back skipped by their ``ts`` statistics, keeps
each series' last row before each span and gives it its keys (series_ids.py); the rows go to
Spark as a local table (Arrow, no job), in the columns and types of the job's snapshots.
"""

from datetime import datetime
from functools import reduce
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from . import layout
from .touched import Span, read_spans

NAMES = ["node", "topic", "channel"]
COUNTERS = ["message_count", "requeue_count", "timeout_count"]
BACKLOG = ["depth", "in_flight", "deferred"]
MINUTE_US = 60_000_000
TS_TYPE = layout.RAW_SCHEMA.field("ts").type
# What the job's snapshots carry (rollup_job._numbers), in its order and types: the look-back's
# gauges are 0 and its e2e null, since none of its minutes is rewritten.
SCHEMA = pa.schema([("sid", pa.int64()), ("all_key", pa.int64()), ("ts_us", pa.int64()), ("minute_us", pa.int64()),
                    ("depth", pa.int64()), ("in_flight", pa.int64()), *((name, pa.int64()) for name in COUNTERS),
                    ("client_count", pa.int64()), ("backlog", pa.int64()), ("paused", pa.bool_()),
                    ("e2e_p99", pa.float64()), ("start_time", pa.int64())])


def _between(start: datetime, end: datetime) -> ds.Expression:
    return (ds.field("ts") >= pa.scalar(start, TS_TYPE)) & (ds.field("ts") < pa.scalar(end, TS_TYPE))


def _snapshots(paths: list[Path], rewrite: list[Span]) -> pa.Table:
    """The look-back's snapshots (not missing-node markers): in the read spans, not rewritten."""
    in_rewrite = reduce(lambda a, b: a | b, (_between(*span) for span in rewrite))
    in_look_back = reduce(lambda a, b: a | b, (_between(*span) for span in read_spans(rewrite)))
    dataset = ds.dataset([str(path) for path in paths], schema=layout.RAW_SCHEMA, format="parquet")
    table = dataset.to_table(columns=["ts", *NAMES, "missing", *BACKLOG, *COUNTERS, "start_time"],
                             filter=in_look_back & ~in_rewrite)
    return table.filter(pc.invert(pc.fill_null(table["missing"], False)))


def _zero_null(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.fill_null(column, 0)


def last_snapshots(paths: list[Path], rewrite: list[Span], keys: pa.Table) -> pa.Table:
    """Of the snapshots in ``paths`` before each of the ``rewrite`` spans (within their look-back),
    each series' last, as rows of :data:`SCHEMA`; ``keys`` is series_ids.named_keys's table."""
    table = _snapshots(paths, rewrite)
    ts_us = table["ts"].cast(pa.int64())
    spans_before = reduce(pc.add, (pc.cast(pc.greater_equal(table["ts"], pa.scalar(end, TS_TYPE)), pa.int64())
                                   for _, end in rewrite), pa.scalar(0, pa.int64()))
    rows = pa.table({
        **{name: table[name] for name in NAMES}, "spans_before": spans_before, "ts_us": ts_us,
        **{name: _zero_null(table[name]) for name in COUNTERS},
        "backlog": reduce(pc.add, (_zero_null(table[name]) for name in BACKLOG)), "start_time": table["start_time"],
    }).sort_by("ts_us")
    rows = rows.append_column("row", pa.array(range(rows.num_rows), pa.int64()))
    last = rows.group_by([*NAMES, "spans_before"], use_threads=False).aggregate([("row", "max")])
    rows = rows.take(last["row_max"]).join(keys, NAMES, join_type="inner")
    ts_us = rows["ts_us"]
    zeros = pa.nulls(rows.num_rows, pa.int64()).fill_null(0)
    return pa.table({
        "sid": rows["key"], "all_key": rows["all_key"], "ts_us": ts_us,
        "minute_us": pc.multiply(pc.divide(ts_us, MINUTE_US), MINUTE_US),
        "depth": zeros, "in_flight": zeros, **{name: rows[name] for name in COUNTERS}, "client_count": zeros,
        "backlog": rows["backlog"], "paused": pa.nulls(rows.num_rows, pa.bool_()).fill_null(False),
        "e2e_p99": pa.nulls(rows.num_rows, pa.float64()), "start_time": rows["start_time"],
    }, schema=SCHEMA)
