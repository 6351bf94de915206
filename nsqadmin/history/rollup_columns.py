"""How each column of a rollup window is computed from what the window covers, as Spark expressions.

Theory of operation. The job carries a window's names as a 64-bit key (series_ids.py) and
puts the names back when it writes. Each level is two aggregations:

- a node's window: a minute from its snapshots and their counter deltas (rollup_job computes
  those); an hour from its minutes and a day from its hours: counters summed, ``depth_avg``
  weighted by samples, ``depth_p95`` over the finer windows' ``depth_avg``, ``*_last`` from the
  last finer window. The same aggregation gives the cluster's own ALL_NODES window: a minute
  from the cluster's polls (at each poll time, the sums of the depths, in-flight counts and
  clients that the nodes reported then), an hour from the ALL_NODES minutes, a day from the
  ALL_NODES hours. So the cluster's ``depth_max``, ``in_flight_max`` and ``clients_max`` are the
  largest sums any poll saw, its ``depth_p95`` the percentile of those sums (a minute) or of its
  finer windows' ``depth_avg`` (an hour, a day), its ``samples`` the polls in the window.
- the window across nodes (:func:`window_aggregates`): every node's window of a topic and
  channel and the cluster's own make the ALL_NODES window, whose counters, ``rate``,
  ``depth_avg`` and ``*_last`` are the sums of the nodes' values at the same level (a node that
  missed polls has its own rate over the time it was seen, so it does not drag the cluster's
  down), ``covered_seconds`` the longest any node covered, and the rest the cluster's own
  window's. The same aggregation passes each node's window through, so one pass yields both.

An incremental run must write the very bits a full run writes, yet Spark adds numbers in
whatever order rows reach an aggregate, and float addition depends on the order. Integer
addition does not: time is summed as integer microseconds, depths as integers, averages
(across nodes, and weighted by samples) as integer thousandths of a message and rates across
nodes as integer billionths of a message a second, so those come out rounded so. Percentiles are the 95th with linear interpolation between the
closest ranks (numpy's default), and the aggregation of every raw row stays a hash aggregation
of fixed-width values, which Spark compiles. Of up to 21 values the 95th lies between the
largest and the next, so a node's minute (6 snapshots at the default 10-second interval, 20 at
3 seconds) needs only its maximum, how many snapshots reach it and the largest value below
it: exact, without sorting anything. An hour's 60 minutes or a day's 24 hours get Spark's
exact ``percentile``, computed by a window once per hour or day and given to each of its rows
as one number (a window collecting the values as an array copied that array into every row,
and sorting it with a comparator Spark interprets cost a tenth of a full run).
"""

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window, functions as F
from pyspark.sql.types import (BooleanType, DataType, DoubleType, LongType, MapType, StringType,
                               StructField, StructType, TimestampType)

from . import layout
from .column_cache import per_context

_SPARK_TYPES = {"timestamp[us, tz=UTC]": TimestampType(), "string": StringType(), "int64": LongType(),
                "double": DoubleType(), "bool": BooleanType()}
MICROS = 1_000_000
PERCENTILE = 0.95
# Averages are added as integer thousandths of a message, rates as integer billionths of a
# message a second: exact, so the same in any order.
FIXED_POINT = 1000
RATE_FIXED_POINT = 1_000_000_000


def spark_type(arrow_type: pa.DataType) -> DataType:
    if pa.types.is_map(arrow_type):
        return MapType(spark_type(arrow_type.key_type), spark_type(arrow_type.item_type))
    return _SPARK_TYPES[str(arrow_type)]


def spark_schema(schema: pa.Schema) -> StructType:
    """One of layout.py's schemas as Spark's."""
    return StructType([StructField(field.name, spark_type(field.type)) for field in schema])


NAMES = ("node", "topic", "channel")
VALUES = tuple(name for name in layout.ROLLUP_SCHEMA.names if name not in NAMES)
# Each value's type by its SQL name: a cast to a DataType object asks the JVM for the active
# session and parses the type's JSON there, a dozen py4j round trips a column, where a name is one
# (5,000 of a warm one-minute run's 16,000 calls were these casts).
_VALUE_TYPES = {name: spark_type(layout.ROLLUP_SCHEMA.field(name).type).simpleString() for name in VALUES}


def value_columns(partial: bool = False, **columns: Column) -> list[Column]:
    """``columns``: every column of layout.ROLLUP_SCHEMA but the names, in its order and types
    (with ``partial``, those not given are null)."""
    missing = set(VALUES) - set(columns)
    assert partial or not missing, f"rollup columns not computed: {sorted(missing)}"
    return [(columns[name] if name in columns else F.lit(None)).cast(_VALUE_TYPES[name]).alias(name)
            for name in VALUES]


def ratio(messages: Column, covered_seconds: Column) -> Column:
    """Messages per second of covered time; 0 for a window that covers no time."""
    return F.when(covered_seconds > 0, messages / covered_seconds).otherwise(F.lit(0.0))


def nearest_long(values: Column) -> Column:
    """``values`` (not negative) rounded to the nearest integer: Spark's round() goes through
    BigDecimal and Double.toString, and took half the time of the hours' aggregation."""
    return F.floor(values + 0.5)


def fixed_point_sum(values: Column) -> Column:
    return F.sum(nearest_long(values * FIXED_POINT))


def with_group_max(frame: DataFrame, group: list[str], value: str) -> DataFrame:
    """``frame`` with ``group_max``, the largest ``value`` of each row's group."""
    return frame.withColumn("group_max", _group_max(tuple(group), value))


@per_context
def _group_max(group: tuple[str, ...], value: str) -> Column:
    return F.max(value).over(Window.partitionBy(*group))


def top_two_p95(count: Column, largest: Column, largest_count: Column, below_largest: Column) -> Column:
    """The percentile of ``count`` values from the largest, how many there are of it, and the
    largest value below it: exact up to 21 values, above that the percentile of the top two."""
    position = (count - 1) * PERCENTILE

    def from_top(index: Column) -> Column:
        return F.when(count - 1 - index < largest_count, largest).otherwise(below_largest)

    return _interpolated(from_top(F.floor(position)), from_top(F.ceil(position)), position)


def with_group_p95(frame: DataFrame, group: list[str], value: str) -> DataFrame:
    """``frame`` with ``group_p95``, the percentile of the ``value``s of each row's ``group``."""
    return frame.withColumn("group_p95", F.percentile(value, PERCENTILE).over(Window.partitionBy(*group)))


def _interpolated(low: Column, high: Column, position: Column) -> Column:
    low, high = low.cast("double"), high.cast("double")
    return low + (high - low) * (position - F.floor(position))


# -- a node's minute, from snapshots: ts_us, depth, in_flight, client_count, paused, e2e_p99, the
#    deltas dt_us, d_messages, d_requeues, d_timeouts, d_finished, and with_group_max of depth -----

@per_context
def node_minute_aggregates() -> list[Column]:
    return [
        F.count(F.lit(1)).alias("samples"),
        F.sum("dt_us").alias("covered_us"),
        F.sum("d_messages").alias("messages"),
        F.sum("d_requeues").alias("requeues"),
        F.sum("d_timeouts").alias("timeouts"),
        F.sum("d_finished").alias("finished"),
        F.max("depth").alias("depth_max"),
        F.sum("depth").alias("depth_sum"),
        F.max("in_flight").alias("in_flight_max"),
        F.max("client_count").alias("clients_max"),
        F.max("e2e_p99").alias("e2e_p99_max"),
        F.max_by("depth", "ts_us").alias("depth_last"),
        F.max_by("in_flight", "ts_us").alias("in_flight_last"),
        F.max_by("client_count", "ts_us").alias("clients_last"),
        F.max_by("paused", "ts_us").alias("paused_last"),
        F.count(F.when(F.col("depth") == F.col("group_max"), True)).alias("depth_max_count"),
        F.max(F.when(F.col("depth") < F.col("group_max"), F.col("depth"))).alias("depth_below_max"),
    ]


@per_context
def node_minute_columns() -> list[Column]:
    """The values of a node's minute, from :func:`node_minute_aggregates` of the minute
    starting at ``minute_us``."""
    covered_seconds = F.col("covered_us") / MICROS
    return value_columns(
        ts=F.timestamp_micros("minute_us"), samples=F.col("samples"), covered_seconds=covered_seconds,
        messages=F.col("messages"), rate=ratio(F.col("messages"), covered_seconds),
        requeues=F.col("requeues"), timeouts=F.col("timeouts"), finished=F.col("finished"),
        depth_max=F.col("depth_max"), depth_avg=F.col("depth_sum") / F.col("samples"),
        depth_p95=top_two_p95(F.col("samples"), F.col("depth_max"), F.col("depth_max_count"),
                              F.col("depth_below_max")),
        depth_last=F.col("depth_last"),
        in_flight_max=F.col("in_flight_max"), in_flight_last=F.col("in_flight_last"),
        clients_max=F.col("clients_max"), clients_last=F.col("clients_last"),
        e2e_p99_max=F.col("e2e_p99_max"), paused_last=F.col("paused_last"),
    )


# -- the cluster's polls and minutes, from the raw rows of every node ---------------------------

@per_context
def cluster_poll_aggregates(columns: tuple[str, ...]) -> list[Column]:
    """Over the raw rows of one poll (``ts_us``) of one topic and channel on every node: the
    cluster's gauges at that moment, the sums of what the nodes that answered reported.

    ``shared`` reads every one of ``columns`` and is carried to the minutes' ``samples`` as 0,
    so that Spark keeps them all in the shuffle the polls share with the deltas (it prunes
    what a use does not read, and runs a shuffle once for two uses only if both read the same)."""
    return [F.sum("depth").alias("depth"), F.sum("in_flight").alias("in_flight"),
            F.sum("client_count").alias("client_count"),
            F.max(F.hash(*columns)).alias("shared")]


@per_context
def cluster_minute_aggregates() -> list[Column]:
    """Over the cluster's polls of one minute, with :func:`with_group_max` of their depth."""
    return [
        F.count(F.lit(1)).alias("samples"),
        F.max("depth").alias("depth_max"),
        F.count(F.when(F.col("depth") == F.col("group_max"), True)).alias("depth_max_count"),
        F.max(F.when(F.col("depth") < F.col("group_max"), F.col("depth"))).alias("depth_below_max"),
        F.max("in_flight").alias("in_flight_max"),
        F.max("client_count").alias("clients_max"),
        F.max("shared").alias("shared"),
    ]


@per_context
def cluster_minute_columns() -> list[Column]:
    """What the cluster's polls decide of an ALL_NODES minute starting at ``minute_us`` (the
    rest null: the nodes' minutes decide it, see :func:`window_aggregates`)."""
    return value_columns(
        partial=True, ts=F.timestamp_micros("minute_us"), samples=F.col("samples") + F.col("shared") * 0,
        depth_max=F.col("depth_max"),
        depth_p95=top_two_p95(F.col("samples"), F.col("depth_max"), F.col("depth_max_count"),
                              F.col("depth_below_max")),
        in_flight_max=F.col("in_flight_max"), clients_max=F.col("clients_max"),
    )


# -- a window per node and across nodes, from each node's window and the cluster's own ---------

def window_aggregates(itself: Column, node_row: Column) -> list[Column]:
    """Over the rows that make one window: a node's window alone, or for an ALL_NODES window
    every node's window of the topic and channel and the cluster's own row (from its polls).
    ``itself`` marks the row that is the window's own (the node's, or the cluster's), whose
    samples and maxima the window keeps; ``node_row`` the nodes' rows, whose counters, rates,
    means and last values are summed (and e2e maxima and pauses combined) across nodes."""

    def own(column: str) -> Column:
        return F.when(itself, F.col(column))

    def of_nodes(column: str) -> Column:
        return F.when(node_row, F.col(column))

    return [
        F.max(own("samples")).alias("samples"),
        F.max(of_nodes("covered_seconds")).alias("covered_seconds"),
        *(F.sum(of_nodes(name)).alias(name) for name in ("messages", "requeues", "timeouts", "finished",
                                                         "depth_last", "in_flight_last", "clients_last")),
        F.max(own("rate")).alias("own_rate"),
        F.sum(nearest_long(of_nodes("rate") * RATE_FIXED_POINT)).alias("rate_fixed"),
        F.max(own("depth_avg")).alias("own_depth_avg"),
        fixed_point_sum(of_nodes("depth_avg")).alias("depth_avg_fixed"),
        *(F.max(own(name)).alias(name) for name in ("depth_max", "depth_p95", "in_flight_max", "clients_max")),
        F.max(of_nodes("e2e_p99_max")).alias("e2e_p99_max"),
        F.bool_or(of_nodes("paused_last")).alias("paused_last"),
    ]


def window_columns(across: Column) -> list[Column]:
    """The values of :func:`window_aggregates` grouped by the window's key and ``ts``; ``across``
    marks an ALL_NODES window."""
    return value_columns(
        ts=F.col("ts"), samples=F.col("samples"), covered_seconds=F.col("covered_seconds"),
        messages=F.col("messages"),
        rate=F.when(across, F.col("rate_fixed") / RATE_FIXED_POINT).otherwise(F.col("own_rate")),
        requeues=F.col("requeues"), timeouts=F.col("timeouts"), finished=F.col("finished"),
        depth_max=F.col("depth_max"),
        depth_avg=F.when(across, F.col("depth_avg_fixed") / FIXED_POINT).otherwise(F.col("own_depth_avg")),
        depth_p95=F.col("depth_p95"), depth_last=F.col("depth_last"),
        in_flight_max=F.col("in_flight_max"), in_flight_last=F.col("in_flight_last"),
        clients_max=F.col("clients_max"), clients_last=F.col("clients_last"),
        e2e_p99_max=F.col("e2e_p99_max"), paused_last=F.col("paused_last"),
    )


# -- an hour from its minutes, a day from its hours --------------------------------------------

@per_context
def coarser_aggregates() -> list[Column]:
    """Over the finer windows of one window, with :func:`with_group_p95` of their ``depth_avg``."""
    return [
        F.sum("samples").alias("samples"),
        F.sum(nearest_long(F.col("covered_seconds") * MICROS)).alias("covered_us"),
        F.sum("messages").alias("messages"),
        F.sum("requeues").alias("requeues"),
        F.sum("timeouts").alias("timeouts"),
        F.sum("finished").alias("finished"),
        F.max("depth_max").alias("depth_max"),
        fixed_point_sum(F.col("depth_avg") * F.col("samples")).alias("depth_weighted_fixed"),
        F.max("in_flight_max").alias("in_flight_max"),
        F.max("clients_max").alias("clients_max"),
        F.max("e2e_p99_max").alias("e2e_p99_max"),
        F.max_by("depth_last", "ts").alias("depth_last"),
        F.max_by("in_flight_last", "ts").alias("in_flight_last"),
        F.max_by("clients_last", "ts").alias("clients_last"),
        F.max_by("paused_last", "ts").alias("paused_last"),
        F.max("group_p95").alias("depth_p95"),
    ]


@per_context
def coarser_columns() -> list[Column]:
    """The values of an hour or a day, from :func:`coarser_aggregates` grouped by the
    window's names or key and its start as ``ts``."""
    covered_seconds = F.col("covered_us") / MICROS
    return value_columns(
        ts=F.col("ts"), samples=F.col("samples"), covered_seconds=covered_seconds,
        messages=F.col("messages"), rate=ratio(F.col("messages"), covered_seconds),
        requeues=F.col("requeues"), timeouts=F.col("timeouts"), finished=F.col("finished"),
        depth_max=F.col("depth_max"), depth_avg=F.col("depth_weighted_fixed") / FIXED_POINT / F.col("samples"),
        depth_p95=F.col("depth_p95"), depth_last=F.col("depth_last"),
        in_flight_max=F.col("in_flight_max"), in_flight_last=F.col("in_flight_last"),
        clients_max=F.col("clients_max"), clients_last=F.col("clients_last"),
        e2e_p99_max=F.col("e2e_p99_max"), paused_last=F.col("paused_last"),
    )
