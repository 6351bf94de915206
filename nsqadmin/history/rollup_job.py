"""The rollup run: raw snapshots into 1-minute, 1-hour and 1-day windows, incrementally.

Theory of operation. One run, under rollups/.lock:

1. Finish or roll back an interrupted compaction and merge the small files of closed blocks
   (compaction.py), then find the raw files not yet rolled up (rollup_state.py). Without any,
   skip to 5: Spark is not even asked for unless stale hours are due.
2. Work out the minutes to rewrite and the raw files to read (touched.py), and read those
   files' rows of the rewritten spans, leaving out the rows that only mark a node as missing;
   of the look-back before each span, only each series' last snapshot, read on the driver
   (look_back.py).
3. The minutes. A shuffle by topic and channel (the ALL_NODES key, series_ids.py) puts every
   node's rows of a topic and channel in one task. Per series (node, topic, channel: a 64-bit
   key), each snapshot's counter deltas from the series' previous snapshot, by a window ordered
   by minute and time (a restart of nsqd makes every counter's value its delta; a gap over
   MAX_DELTA_GAP starts a new baseline), then one row per series and minute by a hash
   aggregation that keeps the partitioning; the cluster's polls (the nodes' gauges summed per
   poll time) and minutes; and the ALL_NODES minutes from both (rollup_columns.py). Names stay
   keys until the rows are written.
4. Each level is written whole for every partition it touches, staged in a hidden directory
   and then each file replaces its partition atomically. A 1m partition (an hour) gets the rows
   it keeps outside the rewritten minutes and the new ones, shuffled so an hour is one task and
   one file; it is published at once, and its hour marked stale in the state.
5. The stale hours' 1h windows, from their published 1m partitions, with the hours their days
   keep; the touched months' 1d windows from those days' 1h windows and the days they keep. A
   run by hand writes them at once; nsqadmin's worker (``coarser_every``) when one of the stale
   hours has closed or they have waited COARSER_EVERY, so its one-minute runs do only the
   minutes. A run that dies before saving the state leaves its raw files new and the hours
   stale, and the next run rewrites the same partitions again.
6. health.json from the newest minutes, then the state, retention, and the closed hours'
   compaction.
"""

import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import reduce
from operator import or_
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession, Window, functions as F

from . import compaction, layout
from .column_cache import named_columns, per_context
from .health_report import write_health
from .partitions import period_start
from .rollup_columns import (NAMES, VALUES, cluster_minute_aggregates, cluster_minute_columns, cluster_poll_aggregates,
                             coarser_aggregates, coarser_columns, node_minute_aggregates, node_minute_columns,
                             spark_schema, window_aggregates, window_columns, with_group_max, with_group_p95)
from .look_back import SCHEMA as LOOK_BACK_ARROW_SCHEMA, last_snapshots
from .series_ids import named_keys, series_names, window_key
from .rollup_state import (RollupState, delete_expired_raw, delete_expired_rollups, load_state, raw_files,
                           raw_hour, rollup_lock, save_state)
from .spark_session import scan_tasks_for, shuffle_partitions_for
from .touched import (MAX_DELTA_GAP, Span, files_to_read, hours_overlapping, new_row_spans, read_spans,
                      rewrite_spans)

log = logging.getLogger("nsqadmin-rollup")

DEFAULT_RETENTION = timedelta(hours=168)
# How long nsqadmin's worker lets the open hour's 1h and 1d windows wait behind its 1m windows.
COARSER_EVERY = timedelta(minutes=10)
RAW_SCHEMA = spark_schema(layout.RAW_SCHEMA)
LOOK_BACK_SCHEMA = spark_schema(LOOK_BACK_ARROW_SCHEMA)
ROLLUP_SCHEMA = spark_schema(layout.ROLLUP_SCHEMA)
ROLLUP_NAMES = layout.ROLLUP_SCHEMA.names
GAUGES_AND_COUNTERS = ("depth", "in_flight", "deferred", "message_count", "requeue_count", "timeout_count",
                       "client_count")
COUNTERS = ("message_count", "requeue_count", "timeout_count")
MINUTE_US = 60_000_000
HOUR_US = 3_600_000_000
MAX_DELTA_GAP_US = MAX_DELTA_GAP // timedelta(microseconds=1)
# How each level is partitioned on disk: the partition columns and their values from ``ts``.
PARTITION_KEYS = {"1m": {"date": "yyyy-MM-dd", "hour": "HH"}, "1h": {"date": "yyyy-MM-dd"},
                  "1d": {"month": "yyyy-MM"}}
PYTHON_FORMATS = {"date": "%Y-%m-%d", "hour": "%H"}
STAGING_PREFIX = ".staging-"


@dataclass
class RollupSummary:
    """What a run did: ``raw_rows`` is the snapshots in the rewritten minutes, ``files`` the raw
    files read, ``windows`` the rows of the rewritten windows per level."""
    raw_rows: int = 0
    files: int = 0
    windows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(layout.WINDOWS, 0))
    seconds: float = 0.0
    rewrite: list[Span] = field(default_factory=list)

    def line(self) -> str:
        levels = ", ".join(f"{level}: {count}" for level, count in self.windows.items())
        return (f"read {self.raw_rows} raw rows from {self.files} files, wrote "
                f"{sum(self.windows.values())} windows ({levels}) in {self.seconds:.1f} s")


def run_rollup(stats_dir: str | Path, spark: Callable[[int], SparkSession], now: datetime | None = None,
               retention: timedelta = DEFAULT_RETENTION, coarser_every: timedelta = timedelta(0)) -> RollupSummary | None:
    """One run over ``stats_dir``; None if another run holds the lock. ``spark(raw_bytes)`` is
    called only when there is something to roll up, with the size of the raw files to read;
    ``now`` decides retention and which hours are closed. The 1h and 1d windows of hours whose
    minutes changed are written at once, or (``coarser_every``) when one of those hours has
    closed or they have waited that long."""
    started = time.monotonic()
    stats_dir = Path(stats_dir)
    now = now or datetime.now(timezone.utc)
    with rollup_lock(stats_dir) as locked:
        if not locked:
            log.info("another rollup is running")
            return None
        _remove_staging(stats_dir)
        state = load_state(stats_dir)
        compaction.recover(stats_dir, state)
        _compact("blocks", lambda: compaction.compact_closed_blocks(stats_dir, state, now))
        summary = _roll_up_new_files(stats_dir, spark, state, now, coarser_every)
        write_health(stats_dir, now)
        _apply_retention(stats_dir, state, now - retention)
        _compact("hours", lambda: compaction.compact_closed_hours(stats_dir, state, now))
    summary.seconds = time.monotonic() - started
    return summary


def _compact(what: str, merge: Callable[[], int]) -> None:
    began = time.monotonic()
    merged = merge()
    if merged:
        log.info("compacted the raw files of %d closed %s in %.1f s", merged, what, time.monotonic() - began)


def _remove_staging(stats_dir: Path) -> None:
    """Staging directories left by runs that died (only the lock holder writes one)."""
    for staging in layout.rollups_dir(stats_dir).glob(STAGING_PREFIX + "*"):
        shutil.rmtree(staging)


def _roll_up_new_files(stats_dir: Path, spark: Callable[[int], SparkSession], state: RollupState, now: datetime,
                       coarser_every: timedelta) -> RollupSummary:
    files = _raw_files_in_layout(stats_dir)
    new_files = [relative for relative in files if relative not in state.seen]
    log.info("found %d raw files, %d new", len(files), len(new_files))
    summary = RollupSummary()
    raw_bytes, wrote_coarser = 0, False
    staging = layout.rollups_dir(stats_dir) / f"{STAGING_PREFIX}{os.getpid()}"
    try:
        if new_files:
            raw_bytes = _roll_up_minutes(stats_dir, spark, staging, files, new_files, state, summary)
            state.seen.update(new_files)
            state.mark_stale(hours_overlapping(summary.rewrite), now)
        if state.coarser_due(now, coarser_every):
            if not new_files:
                spark(raw_bytes).conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions_for(raw_bytes)))
            _roll_up_coarser(stats_dir, spark(raw_bytes), staging, state, summary)
            state.coarser_written()
            wrote_coarser = True
        elif state.stale_hours:
            log.info("the 1h and 1d windows of %d hours wait for a later run", len(state.stale_hours))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if new_files or wrote_coarser:
        save_state(stats_dir, state)
    return summary


def _raw_files_in_layout(stats_dir: Path) -> list[str]:
    """The visible raw files, less (with a warning) any outside a date=/hour= directory."""
    files = []
    for relative in raw_files(stats_dir):
        try:
            raw_hour(relative)
        except ValueError as exc:
            log.warning("ignoring raw file: %s", exc)
            continue
        files.append(relative)
    return files


def _roll_up_minutes(stats_dir: Path, spark: Callable[[int], SparkSession], staging: Path, files: list[str],
                     new_files: list[str], state: RollupState, summary: RollupSummary) -> int:
    """Rewrite and publish the 1m partitions the new files touch; the bytes of raw files read."""
    raw = layout.raw_dir(stats_dir)
    rewrite = rewrite_spans(new_row_spans(raw, new_files, state.seen))
    paths = [raw / relative for relative in files_to_read(raw, files, read_spans(rewrite))]
    raw_bytes = sum(path.stat().st_size for path in paths)
    log.info("reading %d raw files (%.1f MB) to rewrite %s", len(paths), raw_bytes / 1e6, _describe(rewrite))
    session = spark(raw_bytes)
    session.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions_for(raw_bytes)))
    session.conf.set("spark.sql.files.minPartitionNum", str(scan_tasks_for(session)))
    hours = hours_overlapping(rewrite)
    keys_table, salt = named_keys(series_names(paths))
    keys = session.createDataFrame(keys_table)
    last = session.createDataFrame(last_snapshots(paths, rewrite, keys_table), LOOK_BACK_SCHEMA)
    in_rewrite = [raw / relative for relative in files_to_read(raw, files, rewrite)]
    new_minutes = _new_minutes(_snapshots(session, in_rewrite, rewrite), last, salt)
    _stage("1m", staging, lambda: _write_minutes(session, staging, new_minutes, keys, hours))
    summary.rewrite, summary.files = rewrite, len(paths)
    summary.raw_rows, summary.windows["1m"] = _count_minutes(_staged(staging, "1m"), rewrite)
    _keep_other_minutes(stats_dir, staging, hours, rewrite)
    _publish_level(stats_dir, staging, "1m", hours, summary)
    return raw_bytes


def _roll_up_coarser(stats_dir: Path, spark: SparkSession, staging: Path, state: RollupState,
                     summary: RollupSummary) -> None:
    """Rewrite and publish the 1h and 1d partitions of the stale hours, from their published
    1m partitions."""
    hours = sorted(state.stale_hours)
    days = sorted({hour.replace(hour=0) for hour in hours})
    months = sorted({day.replace(day=1) for day in days})
    _stage("1h", staging, lambda: _write_hours(spark, stats_dir, staging, hours, days))
    _stage("1d", staging, lambda: _write_days(spark, stats_dir, staging, days, months))
    summary.windows["1h"] = _count_windows(_staged(staging, "1h"), hours)
    summary.windows["1d"] = _count_windows(_staged(staging, "1d"), days)
    _publish_level(stats_dir, staging, "1h", days, summary)
    _publish_level(stats_dir, staging, "1d", months, summary)


def _stage(level: str, staging: Path, write: Callable[[], None]) -> None:
    started = time.monotonic()
    write()
    log.info("staged %d %s partitions in %.1f s", len(_staged(staging, level)), level, time.monotonic() - started)


def _publish_level(stats_dir: Path, staging: Path, level: str, partitions: list[datetime],
                   summary: RollupSummary) -> None:
    files = len(_staged(staging, level))
    _publish(stats_dir, staging, level, partitions)
    log.info("wrote %d %s windows into %d partitions", summary.windows[level], level, files)


def _describe(spans: list[Span]) -> str:
    return ", ".join(f"[{start:%Y-%m-%d %H:%M}, {end:%Y-%m-%d %H:%M})" for start, end in spans)


def _snapshots(spark: SparkSession, paths: list[Path], rewrite: list[Span]) -> DataFrame:
    """The raw rows of the ``rewrite`` spans that are snapshots (not missing-node markers).

    The spans are a broadcast table the rows are joined with, not literals in a filter: Spark
    inlines a filter's times in the code it generates, so a warm worker compiled that code
    again every run (Janino, ~0.3 s of a one-minute run's ~2), where with the spans as data the
    code is the same from one run to the next and comes from Spark's cache. The filter's
    Parquet row-group skipping goes with it, so ``paths`` are the files with rows in the spans
    (not the look-back's: look_back.py reads those)."""
    raw = spark.read.schema(RAW_SCHEMA).parquet(*map(str, paths))
    spans = spark.createDataFrame(pa.table({
        "span_start": pa.array([start for start, _ in rewrite], layout.RAW_SCHEMA.field("ts").type),
        "span_end": pa.array([end for _, end in rewrite], layout.RAW_SCHEMA.field("ts").type)}))
    snapshot, within = _snapshot_conditions()
    return raw.where(snapshot).join(F.broadcast(spans), within, "left_semi")


@per_context
def _snapshot_conditions() -> tuple[Column, Column]:
    """For :func:`_snapshots`: a raw row is a snapshot, and lies within its span."""
    ts = F.col("ts")
    return ~F.coalesce(F.col("missing"), F.lit(False)), (ts >= F.col("span_start")) & (ts < F.col("span_end"))


def _numbers(snapshots: DataFrame, salt: int) -> DataFrame:
    """What the deltas and the minute aggregates need of a snapshot, with its series' key as
    ``sid`` and its topic's and channel's ALL_NODES key as ``all_key`` (series_ids.py). A null
    gauge or counter counts as 0."""
    return snapshots.select(*_number_columns(salt))


@per_context
def _number_columns(salt: int) -> list[Column]:
    ts_us = F.unix_micros("ts")
    value = {name: F.coalesce(F.col(name), F.lit(0)) for name in GAUGES_AND_COUNTERS}
    return [
        window_key(salt).alias("sid"), window_key(salt, F.lit(layout.ALL_NODES)).alias("all_key"),
        ts_us.alias("ts_us"), (ts_us - ts_us % MINUTE_US).alias("minute_us"),
        *(value[name].alias(name) for name in ("depth", "in_flight", "message_count", "requeue_count",
                                               "timeout_count", "client_count")),
        (value["depth"] + value["in_flight"] + value["deferred"]).alias("backlog"),
        F.coalesce(F.col("paused"), F.lit(False)).alias("paused"),
        F.col("e2e_ns").getItem("0.99").alias("e2e_p99"),
        F.col("start_time"), F.lit(False).alias("look_back"),
    ]


def _with_deltas(numbers: DataFrame) -> DataFrame:
    """Each snapshot with its counter deltas from the series' previous snapshot (``dt_us`` the
    time between them), or zeros as a new baseline. Ordered by minute first, which the time
    orders the same way, so that the minutes' window after it finds its rows already sorted.

    A restart of the node (its start_time changed, or any of the series' counters went down:
    nsqd counts from zero again, as it does for a topic or channel deleted and made again) makes
    every counter's value its delta: all that was counted since the restart. ``finished``, what
    left the queue, is the messages in less the growth of the backlog (depth + in flight +
    deferred) whether or not nsqd restarted in between: nsqd writes its whole backlog to disk
    when it stops and has it again when it starts, so the backlog before a restart is the one
    after it has grown from (messages lost to a crash count as having left)."""
    lags, deltas = _delta_columns()
    return numbers.withColumns(lags).withColumns(deltas)


@per_context
def _delta_columns() -> tuple[dict[str, Column], dict[str, Column]]:
    """For :func:`_with_deltas`: the previous snapshot's values, then the deltas from them."""
    series = Window.partitionBy("all_key", "sid").orderBy("minute_us", "ts_us")
    lags = {f"prev_{column}": F.lag(column).over(series)
            for column in ("ts_us", *COUNTERS, "backlog", "start_time")}
    continues = F.col("prev_ts_us").isNotNull() & (F.col("ts_us") - F.col("prev_ts_us") <= MAX_DELTA_GAP_US)
    restarted = reduce(or_, [F.col(counter) < F.col(f"prev_{counter}") for counter in COUNTERS],
                       F.coalesce(F.col("start_time") != F.col("prev_start_time"), F.lit(False)))

    def delta(counter: str) -> Column:
        current, before = F.col(counter), F.col(f"prev_{counter}")
        return F.when(~continues, 0).when(restarted, current).otherwise(current - before)

    finished = F.when(~continues, 0).otherwise(
        F.greatest(F.lit(0), delta("message_count") - (F.col("backlog") - F.col("prev_backlog"))))
    return lags, {
        "dt_us": F.when(continues, F.col("ts_us") - F.col("prev_ts_us")).otherwise(0),
        "d_messages": delta("message_count"),
        "d_requeues": delta("requeue_count"),
        "d_timeouts": delta("timeout_count"),
        "d_finished": finished,
    }


def _new_minutes(snapshots: DataFrame, last: DataFrame, salt: int) -> DataFrame:
    """The rewritten minutes of every series (``key``, ``all_key``, values) and of every
    topic's and channel's ALL_NODES row (``key`` = ``all_key``).

    One shuffle, by ``all_key``, puts each topic's and channel's rows of every node in one
    task. There the window finds each snapshot's predecessor in its series, the nodes' minutes
    are aggregated, the cluster's polls (the nodes' gauges summed per poll) and minutes too,
    and both combine into the ALL_NODES minutes (:func:`_across_nodes`), each step on the
    partitioning the shuffle gave. Spark runs a shuffle used twice once only if the plans under
    both uses are the same, so the polls read every column of the snapshots (see
    rollup_columns.cluster_poll_aggregates) and all of them, the look-back's too, whose
    ALL_NODES minutes are then left out (no node minute of theirs gives them a covered time):
    a filter on their minutes would be pushed under the shuffle. Otherwise each use would read
    and shuffle the raw rows on its own, a third of a full run. The look-back's rows are told
    apart by a flag rather than by their times, which would be literals in generated code (see
    :func:`_snapshots`)."""
    numbers = _numbers(snapshots, salt).unionByName(last.withColumn("look_back", F.lit(True))).repartition("all_key")
    deltas = _with_deltas(numbers).where(~F.col("look_back"))
    group = ["all_key", "sid", "minute_us"]
    nodes_out, cluster_out = _minute_outputs()
    nodes = (with_group_max(deltas, group, "depth").groupBy(*group).agg(*node_minute_aggregates())
             .select(*nodes_out))
    polls = numbers.groupBy("all_key", "minute_us", "ts_us").agg(*cluster_poll_aggregates(tuple(numbers.columns)))
    cluster = (with_group_max(polls, ["all_key", "minute_us"], "depth").groupBy("all_key", "minute_us")
               .agg(*cluster_minute_aggregates()).select(*cluster_out))
    minutes = _across_nodes(nodes.unionByName(cluster), ["all_key"], "key", "all_key")
    return minutes.where(F.col("covered_seconds").isNotNull())  # not the look-back's: no node minute


@per_context
def _minute_outputs() -> tuple[list[Column], list[Column]]:
    """For :func:`_new_minutes`: the columns of the nodes' minutes and of the cluster's."""
    return ([F.col("sid").alias("key"), F.col("all_key"), *node_minute_columns()],
            [F.col("all_key").alias("key"), F.col("all_key"), *cluster_minute_columns()])


def _across_nodes(windows: DataFrame, by: list[str], own: str, everyone: str) -> DataFrame:
    """``windows`` (the nodes' windows and the cluster's own, rollup_columns.window_aggregates)
    as the nodes' windows unchanged and the ALL_NODES windows. ``own`` names a window (a key or
    the node), ``everyone`` is its ALL_NODES value (an SQL expression), and ``by`` are grouped on
    as well (columns the input is partitioned by, so no shuffle is needed)."""
    window, windows_of_row, aggregates, columns = _across_nodes_columns(own, everyone)
    return (windows.withColumn(window, windows_of_row).groupBy(*by, window, "ts").agg(*aggregates)
            .select(*named_columns(*by), *columns))


@per_context
def _across_nodes_columns(own: str, everyone: str) -> tuple[str, Column, list[Column], list[Column]]:
    """For :func:`_across_nodes`: the name of the window a row goes to, the windows of each row
    (its own, and the ALL_NODES one unless it is that), the aggregates and the output columns."""
    window, all_nodes = f"window_{own}", F.expr(everyone)
    own_only = F.col(own) == all_nodes
    windows_of_row = F.explode(F.when(own_only, F.array(F.col(own))).otherwise(F.array(F.col(own), all_nodes)))
    aggregates = window_aggregates(itself=F.col(own) == F.col(window), node_row=F.col(own) != all_nodes)
    columns = [F.col(window).alias(own), *window_columns(across=F.col(window) == all_nodes)]
    return window, windows_of_row, aggregates, columns


def _existing(stats_dir: Path, level: str, periods: list[datetime]) -> list[Path]:
    paths = (layout.rollup_partition(stats_dir, level, start) for start in periods)
    return [path for path in paths if path.exists()]


def _read_rollups(spark: SparkSession, paths: list[Path]) -> DataFrame:
    if not paths:
        # From Arrow, a local table: from an empty list, Spark makes a Python RDD, and a job that
        # reads it starts a Python worker (1.2-1.4 s of a first full rollup's wall time, twice).
        return spark.createDataFrame(layout.ROLLUP_SCHEMA.empty_table())
    return spark.read.schema(ROLLUP_SCHEMA).parquet(*map(str, paths))


def _named(keyed: DataFrame, keys: DataFrame, *others: str) -> DataFrame:
    """Rollup rows from rows with a window ``key`` (and the columns ``others``, kept after them)."""
    return (keyed.join(F.broadcast(keys.select(*named_columns("key", *NAMES))), "key")
            .select(*named_columns(*ROLLUP_NAMES, *others)))


def _with_partition_keys(frame: DataFrame, level: str) -> DataFrame:
    for name, pattern in PARTITION_KEYS[level].items():
        frame = frame.withColumn(name, F.date_format("ts", pattern))
    return frame


def _write_minutes(spark: SparkSession, staging: Path, new_minutes: DataFrame, keys: DataFrame,
                   touched: list[datetime]) -> None:
    """The rewritten minutes of the ``touched`` hours, one task and one file per hour."""
    minutes = (new_minutes.withColumn("hour_start", _hour_start()).repartition("hour_start")
               .select(*named_columns("hour_start", "key", *VALUES)))
    rows = (_named(minutes, keys, "hour_start").join(F.broadcast(_hour_partitions(spark, touched)), "hour_start")
            .drop("hour_start"))
    rows.write.partitionBy(*PARTITION_KEYS["1m"]).parquet(str(staging / "1m"))


@per_context
def _hour_start() -> Column:
    ts_us = F.unix_micros("ts")
    return F.timestamp_micros(ts_us - ts_us % HOUR_US)


def _keep_other_minutes(stats_dir: Path, staging: Path, hours: list[datetime], rewrite: list[Span]) -> None:
    """Add to each touched hour's staged 1m file the windows its partition keeps outside the
    rewritten minutes (every node's and the ALL_NODES ones). Done here rather than in Spark: a
    one-minute run's new minutes are 1/60 of an hour's, and Spark reading, shuffling and
    writing the other 59 cost more than the whole rest of the run."""
    for final in _existing(stats_dir, "1m", hours):
        kept = pq.read_table(final, schema=layout.ROLLUP_SCHEMA)
        kept = kept.filter(pc.invert(_within_arrow(kept["ts"], rewrite)))
        if kept.num_rows == 0:
            continue
        staged_dir = staging / "1m" / final.parent.relative_to(layout.rollups_dir(stats_dir) / "1m")
        new = layout.visible_files(staged_dir)
        merged = pa.concat_tables([kept, *(pq.read_table(path, schema=layout.ROLLUP_SCHEMA) for path in new)])
        staged_dir.mkdir(parents=True, exist_ok=True)
        pq.write_table(merged, staged_dir / layout.ROLLUP_FILE)
        for path in new:
            path.unlink()


def _within_arrow(ts: pa.ChunkedArray, spans: list[Span]) -> pa.ChunkedArray:
    return reduce(pc.or_, [pc.and_(pc.greater_equal(ts, start), pc.less(ts, end)) for start, end in spans])


def _hour_partitions(spark: SparkSession, hours: list[datetime]) -> DataFrame:
    """Each of ``hours`` as ``hour_start`` with its 1m partition's ``date`` and ``hour``: joined
    to the rows rather than formatted from each row's time."""
    return spark.createDataFrame(pa.table({
        "hour_start": pa.array(hours, layout.ROLLUP_SCHEMA.field("ts").type),
        **{name: pa.array([f"{hour:{PYTHON_FORMATS[name]}}" for hour in hours]) for name in PARTITION_KEYS["1m"]},
    }))


def _write_hours(spark: SparkSession, stats_dir: Path, staging: Path, hours: list[datetime],
                 days: list[datetime]) -> None:
    """The touched days' 1h partitions: the windows of ``hours``, from their 1m partitions,
    with the other hours' windows kept."""
    minutes = _read_rollups(spark, _existing(stats_dir, "1m", hours))
    kept = _read_rollups(spark, _existing(stats_dir, "1h", days)).where(~F.col("ts").isin(hours))
    _write_level(staging, "1h", _coarser(minutes, "hour").unionByName(kept))


def _write_days(spark: SparkSession, stats_dir: Path, staging: Path, days: list[datetime],
                months: list[datetime]) -> None:
    """The touched months' 1d partitions: the rewritten days' windows, from the 1h windows just
    staged, with those kept."""
    kept = _read_rollups(spark, _existing(stats_dir, "1d", months)).where(~F.col("ts").isin(days))
    _write_level(staging, "1d", _coarser(_read_rollups(spark, _staged(staging, "1h")), "day").unionByName(kept))


def _coarser(finer: DataFrame, unit: str) -> DataFrame:
    """The windows of each ``unit`` ("hour", "day") from the ``finer`` windows in it: each
    node's from its own, the cluster's own from the ALL_NODES ones, and both combined across
    nodes (:func:`_across_nodes`)."""
    finer = finer.withColumn("period", F.date_trunc(unit, "ts"))
    windows = (with_group_p95(finer, [*NAMES, "period"], "depth_avg").groupBy(*NAMES, "period")
               .agg(*coarser_aggregates()).withColumn("ts", F.col("period")).select(*NAMES, *coarser_columns()))
    return _across_nodes(windows, ["topic", "channel"], "node", f"'{layout.ALL_NODES}'").select(*ROLLUP_NAMES)


def _write_level(staging: Path, level: str, windows: DataFrame) -> None:
    """``windows`` as one file per partition of ``level``, sorted the way pages read them."""
    keys = list(PARTITION_KEYS[level])
    (_with_partition_keys(windows, level).repartition(*keys)
     .sortWithinPartitions(*keys, "topic", "channel", "ts", "node")
     .write.partitionBy(*keys).parquet(str(staging / level)))


def _staged(staging: Path, level: str) -> list[Path]:
    return layout.visible_files(staging / level)


def _count_minutes(files: list[Path], rewrite: list[Span]) -> tuple[int, int]:
    """(snapshots rolled up, windows written) in the rewritten minutes of the staged 1m files."""
    snapshots = windows = 0
    for path in files:
        table = pq.read_table(path, columns=["ts", "node", "samples"])
        rewritten = table.filter(_within_arrow(table["ts"], rewrite))
        windows += rewritten.num_rows
        snapshots += pc.sum(rewritten.filter(pc.not_equal(rewritten["node"], layout.ALL_NODES))["samples"]).as_py() or 0
    return snapshots, windows


def _count_windows(files: list[Path], rewritten: list[datetime]) -> int:
    """The staged windows that start at one of ``rewritten``."""
    return sum(pc.sum(pc.is_in(pq.read_table(path, columns=["ts"])["ts"], value_set=pa.array(
        rewritten, layout.ROLLUP_SCHEMA.field("ts").type))).as_py() or 0 for path in files)


def _publish(stats_dir: Path, staging: Path, level: str, partitions: list[datetime]) -> None:
    """Each staged file replaces its partition; a touched partition left with no rows goes."""
    staged: dict[datetime, Path] = {}
    for path in _staged(staging, level):
        start = period_start(level, path.relative_to(staging / level))
        if start in staged:
            raise RuntimeError(f"Spark wrote more than one file for {path.parent}")
        staged[start] = path
    for start in partitions:
        final = layout.rollup_partition(stats_dir, level, start)
        if start in staged:
            final.parent.mkdir(parents=True, exist_ok=True)
            twin = layout.hidden_twin(final)
            os.replace(staged[start], twin)
            layout.publish(twin, final)
        else:
            final.unlink(missing_ok=True)


def _apply_retention(stats_dir: Path, state: RollupState, cutoff: datetime) -> None:
    raw_dirs = delete_expired_raw(stats_dir, state, cutoff)
    partitions = delete_expired_rollups(stats_dir, cutoff)
    if raw_dirs or partitions:
        save_state(stats_dir, state)
        log.info("retention: deleted %d raw hours and %d rollup partitions that ended before %s",
                 raw_dirs, partitions, f"{cutoff:%Y-%m-%d %H:%M:%S}")
