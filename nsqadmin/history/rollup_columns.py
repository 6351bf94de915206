"""How each column of a rollup window is computed from what the window covers, as Spark expressions.

Theory of operation. Three aggregations fill layout.ROLLUP_SCHEMA:

- a node's minute, from its snapshots and their counter deltas (rollup_job computes those);
- the minute across nodes (``node`` ALL_NODES), from the nodes' minutes: counters summed,
  ``covered_seconds`` and ``samples`` the largest node's, gauges summed (the sums of the nodes'
  values: the cluster's own for ``*_last`` and ``depth_avg``, upper bounds for ``depth_max`` and
  ``depth_p95`` when nodes peak at different moments). The same aggregation passes each node's
  own row through, so one pass writes both;
- an hour from its minutes and a day from its hours, for every node and for ALL_NODES:
  counters summed, ``depth_avg`` weighted by samples, ``depth_p95`` over the finer windows'
  ``depth_avg``, ``*_last`` from the last finer window.

An incremental run must write the very bits a full run writes, yet Spark adds numbers in
whatever order rows reach an aggregate, and float addition depends on the order. Integer
addition does not: time is summed as integer microseconds, depths as integers, and averages
(across nodes, and weighted by samples) as integer thousandths of a message, so those come out
rounded to a thousandth. Percentiles are exact: the 95th with linear interpolation between the
closest ranks (numpy's default). A node's minute takes its ranks from a window ordered by
depth, so the aggregation of every raw row stays a hash aggregation of fixed-width values,
which Spark compiles; an hour or a day sorts its 60 or 24 finer averages in an array.
"""

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window, functions as F
from pyspark.sql.types import (BooleanType, DataType, DoubleType, LongType, MapType, StringType,
                               StructField, StructType, TimestampType)

from . import layout

_SPARK_TYPES = {"timestamp[us, tz=UTC]": TimestampType(), "string": StringType(), "int64": LongType(),
                "double": DoubleType(), "bool": BooleanType()}
MICROS = 1_000_000
PERCENTILE = 0.95
# Averages are added as integer thousandths of a message: exact, so the same in any order.
FIXED_POINT = 1000


def spark_type(arrow_type: pa.DataType) -> DataType:
    if pa.types.is_map(arrow_type):
        return MapType(spark_type(arrow_type.key_type), spark_type(arrow_type.item_type))
    return _SPARK_TYPES[str(arrow_type)]


def spark_schema(schema: pa.Schema) -> StructType:
    """One of layout.py's schemas as Spark's."""
    return StructType([StructField(field.name, spark_type(field.type)) for field in schema])


def rollup_columns(**columns: Column) -> list[Column]:
    """``columns`` in layout.ROLLUP_SCHEMA's order and types (every column must be given)."""
    missing = set(layout.ROLLUP_SCHEMA.names) - set(columns)
    assert not missing, f"rollup columns not computed: {sorted(missing)}"
    return [columns[field.name].cast(spark_type(field.type)).alias(field.name) for field in layout.ROLLUP_SCHEMA]


def ratio(messages: Column, covered_seconds: Column) -> Column:
    """Messages per second of covered time; 0 for a window that covers no time."""
    return F.when(covered_seconds > 0, messages / covered_seconds).otherwise(F.lit(0.0))


def nearest_long(values: Column) -> Column:
    """``values`` (not negative) rounded to the nearest integer: Spark's round() goes through
    BigDecimal and Double.toString, and took half the time of the hours' aggregation."""
    return F.floor(values + 0.5)


def fixed_point_sum(values: Column) -> Column:
    return F.sum(nearest_long(values * FIXED_POINT))


def with_p95_ranks(frame: DataFrame, group: list[str], value: str) -> DataFrame:
    """``frame`` with ``p95_low`` and ``p95_high``: ``value`` on the rows at the two ranks the
    95th percentile of each ``group`` lies between, null on the others."""
    by_value = Window.partitionBy(*group).orderBy(value)
    count = F.count(F.lit(1)).over(by_value.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))
    ranked = (frame.withColumn("p95_rank", F.row_number().over(by_value) - 1)
              .withColumn("p95_position", (count - 1) * PERCENTILE))
    rank, position = F.col("p95_rank"), F.col("p95_position")
    return (ranked.withColumn("p95_low", F.when(rank == F.floor(position), F.col(value)))
            .withColumn("p95_high", F.when(rank == F.ceil(position), F.col(value))))


def p95_aggregates() -> list[Column]:
    return [F.max("p95_low").alias("p95_low"), F.max("p95_high").alias("p95_high")]


def sorted_p95(values: Column) -> Column:
    """The percentile of a sorted, non-empty array."""
    position = (F.size(values) - 1) * PERCENTILE
    lower = F.floor(position)
    low = F.element_at(values, (lower + 1).cast("int"))
    high = F.element_at(values, (F.ceil(position) + 1).cast("int"))
    return _interpolated(low, high, position)


def _interpolated(low: Column, high: Column, position: Column) -> Column:
    low, high = low.cast("double"), high.cast("double")
    return low + (high - low) * (position - F.floor(position))


def ranked_p95(count: Column) -> Column:
    """The percentile of ``count`` values from the aggregated ``p95_low`` and ``p95_high``."""
    return _interpolated(F.col("p95_low"), F.col("p95_high"), (count - 1) * PERCENTILE)


# -- a node's minute, from snapshots: ts_us, depth, in_flight, client_count, paused, e2e_p99, the
#    deltas dt_us, d_messages, d_requeues, d_timeouts, d_finished, and with_p95_ranks of depth ------

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
        *p95_aggregates(),
    ]


def node_minute_columns() -> list[Column]:
    """The rollup row of a node's minute, from :func:`node_minute_aggregates` of the minute
    starting at ``minute_us``, with the series' ``node``, ``topic`` and ``channel``."""
    covered_seconds = F.col("covered_us") / MICROS
    return rollup_columns(
        ts=F.timestamp_micros("minute_us"), node=F.col("node"), topic=F.col("topic"), channel=F.col("channel"),
        samples=F.col("samples"), covered_seconds=covered_seconds,
        messages=F.col("messages"), rate=ratio(F.col("messages"), covered_seconds),
        requeues=F.col("requeues"), timeouts=F.col("timeouts"), finished=F.col("finished"),
        depth_max=F.col("depth_max"), depth_avg=F.col("depth_sum") / F.col("samples"),
        depth_p95=ranked_p95(F.col("samples")), depth_last=F.col("depth_last"),
        in_flight_max=F.col("in_flight_max"), in_flight_last=F.col("in_flight_last"),
        clients_max=F.col("clients_max"), clients_last=F.col("clients_last"),
        e2e_p99_max=F.col("e2e_p99_max"), paused_last=F.col("paused_last"),
    )


# -- a minute per node and across nodes, from the nodes' minute rows --------------------------

def minute_aggregates() -> list[Column]:
    """Over the rows of one (topic, channel, minute) with a ``window_node``: a node's own row,
    whose sums and maxima are its values, or every node's rows for ALL_NODES."""
    return [
        F.max("samples").alias("samples"),
        F.max("covered_seconds").alias("covered_seconds"),
        F.sum("messages").alias("messages"),
        F.sum("requeues").alias("requeues"),
        F.sum("timeouts").alias("timeouts"),
        F.sum("finished").alias("finished"),
        F.sum("depth_max").alias("depth_max"),
        F.max("depth_avg").alias("node_depth_avg"),
        fixed_point_sum(F.col("depth_avg")).alias("depth_avg_fixed"),
        F.max("depth_p95").alias("node_depth_p95"),
        fixed_point_sum(F.col("depth_p95")).alias("depth_p95_fixed"),
        F.sum("depth_last").alias("depth_last"),
        F.sum("in_flight_max").alias("in_flight_max"),
        F.sum("in_flight_last").alias("in_flight_last"),
        F.sum("clients_max").alias("clients_max"),
        F.sum("clients_last").alias("clients_last"),
        F.max("e2e_p99_max").alias("e2e_p99_max"),
        F.bool_or("paused_last").alias("paused_last"),
    ]


def minute_columns() -> list[Column]:
    """The rollup row of :func:`minute_aggregates` grouped by ``window_node``, topic, channel
    and ``ts``: a node's row unchanged, or the ALL_NODES row."""
    across_nodes = F.col("window_node") == layout.ALL_NODES
    return rollup_columns(
        ts=F.col("ts"), node=F.col("window_node"), topic=F.col("topic"), channel=F.col("channel"),
        samples=F.col("samples"), covered_seconds=F.col("covered_seconds"),
        messages=F.col("messages"), rate=ratio(F.col("messages"), F.col("covered_seconds")),
        requeues=F.col("requeues"), timeouts=F.col("timeouts"), finished=F.col("finished"),
        depth_max=F.col("depth_max"),
        depth_avg=F.when(across_nodes, F.col("depth_avg_fixed") / FIXED_POINT).otherwise(F.col("node_depth_avg")),
        depth_p95=F.when(across_nodes, F.col("depth_p95_fixed") / FIXED_POINT).otherwise(F.col("node_depth_p95")),
        depth_last=F.col("depth_last"), in_flight_max=F.col("in_flight_max"), in_flight_last=F.col("in_flight_last"),
        clients_max=F.col("clients_max"), clients_last=F.col("clients_last"),
        e2e_p99_max=F.col("e2e_p99_max"), paused_last=F.col("paused_last"),
    )


# -- an hour from its minutes, a day from its hours --------------------------------------------

def coarser_aggregates() -> list[Column]:
    """Over at most 60 minutes or 24 hours: the finer windows' ``depth_avg`` fit in a sorted
    array, and partial aggregation before the shuffle leaves one row per window and task."""
    return [
        F.sum("samples").alias("samples"),
        F.sum(nearest_long(F.col("covered_seconds") * MICROS)).alias("covered_us"),
        F.sum("messages").alias("messages"),
        F.sum("requeues").alias("requeues"),
        F.sum("timeouts").alias("timeouts"),
        F.sum("finished").alias("finished"),
        F.max("depth_max").alias("depth_max"),
        fixed_point_sum(F.col("depth_avg") * F.col("samples")).alias("depth_weighted_fixed"),
        F.array_sort(F.collect_list("depth_avg")).alias("depth_avgs"),
        F.max("in_flight_max").alias("in_flight_max"),
        F.max("clients_max").alias("clients_max"),
        F.max("e2e_p99_max").alias("e2e_p99_max"),
        F.max_by("depth_last", "ts").alias("depth_last"),
        F.max_by("in_flight_last", "ts").alias("in_flight_last"),
        F.max_by("clients_last", "ts").alias("clients_last"),
        F.max_by("paused_last", "ts").alias("paused_last"),
    ]


def coarser_columns() -> list[Column]:
    """The rollup row of an hour or a day, from :func:`coarser_aggregates` grouped by node,
    topic, channel and the window's start as ``ts``."""
    covered_seconds = F.col("covered_us") / MICROS
    return rollup_columns(
        ts=F.col("ts"), node=F.col("node"), topic=F.col("topic"), channel=F.col("channel"),
        samples=F.col("samples"), covered_seconds=covered_seconds,
        messages=F.col("messages"), rate=ratio(F.col("messages"), covered_seconds),
        requeues=F.col("requeues"), timeouts=F.col("timeouts"), finished=F.col("finished"),
        depth_max=F.col("depth_max"), depth_avg=F.col("depth_weighted_fixed") / FIXED_POINT / F.col("samples"),
        depth_p95=sorted_p95(F.col("depth_avgs")), depth_last=F.col("depth_last"),
        in_flight_max=F.col("in_flight_max"), in_flight_last=F.col("in_flight_last"),
        clients_max=F.col("clients_max"), clients_last=F.col("clients_last"),
        e2e_p99_max=F.col("e2e_p99_max"), paused_last=F.col("paused_last"),
    )
