"""How each column of a rollup window is computed from what the window covers, as Spark expressions.

Theory of operation. Three aggregations fill layout.ROLLUP_SCHEMA:

- a node's minute, from its snapshots and their counter deltas (rollup_job computes those);
- the minute across nodes (``node`` ALL_NODES), from the nodes' minutes: counters summed,
  ``covered_seconds`` and ``samples`` the largest node's, gauges summed (the sums of the nodes'
  values: exact for ``*_last`` and ``depth_avg``, upper bounds for ``depth_max`` and ``depth_p95``
  when nodes peak at different moments);
- an hour from its minutes and a day from its hours, for every node and for ALL_NODES:
  counters summed, ``depth_avg`` weighted by samples, ``depth_p95`` over the finer windows'
  ``depth_avg``, ``*_last`` from the last finer window.

An incremental run must write the very bits a full run writes, yet Spark adds numbers in
whatever order rows reach an aggregate. Integer sums do not care; so time is summed as
integer microseconds, depths as integers, the samples-weighted depths as decimals (exact), and
the sums across nodes run over rows sorted by node. Percentiles are exact: the 95th with linear
interpolation between the closest ranks (numpy's default). Ranks come from a window ordered
by value, so the aggregation itself stays a hash aggregation of fixed-width values, compiled by
Spark, with no arrays.
"""

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window, functions as F
from pyspark.sql.types import (BooleanType, DataType, DecimalType, DoubleType, LongType, MapType, StringType,
                               StructField, StructType, TimestampType)

from . import layout

_SPARK_TYPES = {"timestamp[us, tz=UTC]": TimestampType(), "string": StringType(), "int64": LongType(),
                "double": DoubleType(), "bool": BooleanType()}
MICROS = 1_000_000
PERCENTILE = 0.95
# Exact sums of samples-weighted averages: 9 decimals of each term, up to 10^29.
WEIGHTED = DecimalType(38, 9)


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


def with_p95_ranks(frame: DataFrame, group: list[str], value: str) -> DataFrame:
    """``frame`` with ``p95_low`` and ``p95_high``: ``value`` on the rows at the two ranks the
    95th percentile of each ``group`` lies between, null on the others."""
    by_value = Window.partitionBy(*group).orderBy(value)
    position = (F.count(F.lit(1)).over(by_value.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))
                - 1) * PERCENTILE
    rank = F.row_number().over(by_value) - 1
    return (frame.withColumn("p95_low", F.when(rank == F.floor(position), F.col(value)))
            .withColumn("p95_high", F.when(rank == F.ceil(position), F.col(value))))


def p95_aggregates() -> list[Column]:
    return [F.max("p95_low").alias("p95_low"), F.max("p95_high").alias("p95_high")]


def p95(count: Column) -> Column:
    """The percentile of ``count`` values from the aggregated ``p95_low`` and ``p95_high``."""
    position = (count - 1) * PERCENTILE
    low, high = F.col("p95_low").cast("double"), F.col("p95_high").cast("double")
    return low + (high - low) * (position - F.floor(position))


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
        depth_p95=p95(F.col("samples")), depth_last=F.col("depth_last"),
        in_flight_max=F.col("in_flight_max"), in_flight_last=F.col("in_flight_last"),
        clients_max=F.col("clients_max"), clients_last=F.col("clients_last"),
        e2e_p99_max=F.col("e2e_p99_max"), paused_last=F.col("paused_last"),
    )


# -- the minute across nodes, as aggregates over a window of its nodes' rows -------------------

def all_nodes_columns(nodes: Window) -> list[Column]:
    """The ALL_NODES rollup row of a minute: aggregates over ``nodes``, a whole-frame window
    spec holding the nodes' rows of one (topic, channel, minute) in node order."""
    messages = F.sum("messages").over(nodes)
    covered_seconds = F.max("covered_seconds").over(nodes)

    def total(column: str) -> Column:
        return F.sum(column).over(nodes)

    return rollup_columns(
        ts=F.col("ts"), node=F.lit(layout.ALL_NODES), topic=F.col("topic"), channel=F.col("channel"),
        samples=F.max("samples").over(nodes), covered_seconds=covered_seconds,
        messages=messages, rate=ratio(messages, covered_seconds),
        requeues=total("requeues"), timeouts=total("timeouts"), finished=total("finished"),
        depth_max=total("depth_max"), depth_avg=total("depth_avg"), depth_p95=total("depth_p95"),
        depth_last=total("depth_last"), in_flight_max=total("in_flight_max"), in_flight_last=total("in_flight_last"),
        clients_max=total("clients_max"), clients_last=total("clients_last"),
        e2e_p99_max=F.max("e2e_p99_max").over(nodes), paused_last=F.bool_or("paused_last").over(nodes),
    )


# -- an hour from its minutes, a day from its hours (finer rows with with_p95_ranks of depth_avg) --

def coarser_aggregates() -> list[Column]:
    return [
        F.count(F.lit(1)).alias("finer_windows"),
        F.sum("samples").alias("samples"),
        F.sum(F.round(F.col("covered_seconds") * MICROS).cast("long")).alias("covered_us"),
        F.sum("messages").alias("messages"),
        F.sum("requeues").alias("requeues"),
        F.sum("timeouts").alias("timeouts"),
        F.sum("finished").alias("finished"),
        F.max("depth_max").alias("depth_max"),
        F.sum((F.col("depth_avg") * F.col("samples")).cast(WEIGHTED)).alias("depth_weighted"),
        F.max("in_flight_max").alias("in_flight_max"),
        F.max("clients_max").alias("clients_max"),
        F.max("e2e_p99_max").alias("e2e_p99_max"),
        F.max_by("depth_last", "ts").alias("depth_last"),
        F.max_by("in_flight_last", "ts").alias("in_flight_last"),
        F.max_by("clients_last", "ts").alias("clients_last"),
        F.max_by("paused_last", "ts").alias("paused_last"),
        *p95_aggregates(),
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
        depth_max=F.col("depth_max"), depth_avg=F.col("depth_weighted").cast("double") / F.col("samples"),
        depth_p95=p95(F.col("finer_windows")), depth_last=F.col("depth_last"),
        in_flight_max=F.col("in_flight_max"), in_flight_last=F.col("in_flight_last"),
        clients_max=F.col("clients_max"), clients_last=F.col("clients_last"),
        e2e_p99_max=F.col("e2e_p99_max"), paused_last=F.col("paused_last"),
    )
