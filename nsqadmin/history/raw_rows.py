"""nsqd's ``/stats`` as the recorder reads it, and one poll's raw rows (layout.RAW_SCHEMA) as an Arrow table.

Theory of operation. msgspec decodes only the fields the rows need, straight into typed
structs, in a quarter of json.loads' time (a 200-channel ``/stats``: ~0.2 ms against
~0.9 ms on the 2-core test machine). A value of the wrong type is a precise error
(``Expected `int`, got `str` - at `$.topics[0].depth```) that makes that node a missing
one, never a file that cannot be written later. The structs are acyclic, so they skip the
garbage collector (gc=False).

The rows are then built a column at a time over every node's topics and channels at
once, as one Arrow batch of answered rows (every topic row, then every channel row) and
one of missing nodes: no dict or object per row. Measured on a poll of 10 nsqd x 200
channels, per value: a list comprehension reads a struct field twice as fast as
map(attrgetter), and ``struct.pack`` turns a list of ints or floats into an Arrow
buffer three times as fast as ``pa.array``. So a number column is one
comprehension and one pack; the node and topic names of the rows are spread by Arrow
(``take`` of each parent's index), and a column's e2e map keys are the %v text of each
distinct quantile, spread the same way. Decoding and building cost ~2.5-3 ms of CPU a
poll each; pyarrow's own JSON reader, which would do both in C++, takes longer than
msgspec's decoding alone for these documents.

Rows of a poll: one per topic (channel ``""``), one per channel, one per missing node.
A topic's own row has nsqd's topic values: depth, backend_depth, message_count, paused
and e2e (the merge of its channels'); nsqd has no in_flight, deferred, requeue, timeout
or client counts for a topic, so those are 0 on its row: a node that answered has
numbers on every row, and null always means "the node did not answer".
"""

import struct
from decimal import Decimal
from itertools import accumulate, chain
from typing import Annotated

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from .layout import RAW_SCHEMA

Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Percentile(msgspec.Struct, gc=False):
    quantile: float = 0.0
    value: float = 0.0


class Latency(msgspec.Struct, gc=False):
    percentiles: list[Percentile] | None = None


class ChannelStats(msgspec.Struct, gc=False):
    channel_name: str = ""
    depth: Int64 = 0
    backend_depth: Int64 = 0
    in_flight_count: Int64 = 0
    deferred_count: Int64 = 0
    message_count: Int64 = 0
    requeue_count: Int64 = 0
    timeout_count: Int64 = 0
    client_count: Int64 = 0
    paused: bool = False
    e2e_processing_latency: Latency | None = None


class TopicStats(msgspec.Struct, gc=False):
    topic_name: str = ""
    channels: list[ChannelStats] | None = None
    depth: Int64 = 0
    backend_depth: Int64 = 0
    message_count: Int64 = 0
    paused: bool = False
    e2e_processing_latency: Latency | None = None


class NodeStats(msgspec.Struct, gc=False):
    topics: list[TopicStats] | None = None


decode_stats = msgspec.json.Decoder(NodeStats).decode

TS_TYPE = RAW_SCHEMA.field("ts").type
E2E_TYPE = RAW_SCHEMA.field("e2e_ns").type


def go_float_text(value: float) -> str:
    """How Go's fmt prints a float64 with %v (the shortest 'g'): 0.99, 1, 1e-05, 1.5e+06."""
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    scientific = len(digits) + exponent - 1
    text = "".join(map(str, digits))
    if scientific < -4 or scientific >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        text = f"{mantissa}e{'-' if scientific < 0 else '+'}{abs(scientific):02d}"
    else:
        text = format(Decimal(f"{text}E{exponent}"), "f")
    return "-" + text if sign else text


def _packed(type_: pa.DataType, code: str, values: list) -> pa.Array:
    """An Arrow array of fixed-width ``values`` (no nulls), packed by ``struct`` in one C call."""
    data = struct.pack(f"{len(values)}{code}", *values)
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(data)])


def int64s(values: list[int]) -> pa.Array:
    return _packed(pa.int64(), "q", values)


def float64s(values: list[float]) -> pa.Array:
    return _packed(pa.float64(), "d", values)


def offsets(counts) -> pa.Array:
    """The int32 list offsets of lists of these lengths."""
    return _packed(pa.int32(), "i", list(accumulate(counts, initial=0)))


def parents(counts) -> pa.Array:
    """The index of each child's parent, for parents with these counts of children, in order."""
    bounds = offsets(counts)
    return pc.list_parent_indices(pa.ListArray.from_arrays(bounds, pa.nulls(bounds[-1].as_py())))


def e2e_maps(rows: list[TopicStats | ChannelStats]) -> pa.MapArray:
    """The e2e_ns column of these rows (an empty map where nsqd has no percentiles).

    Each percentile's key is its quantile's %v text, computed once per distinct quantile
    (a cluster has a handful) and spread over the rows by Arrow."""
    lists = [(latency.percentiles or ()) if (latency := row.e2e_processing_latency) is not None else ()
             for row in rows]
    flat = list(chain.from_iterable(lists))
    quantiles = float64s([percentile.quantile for percentile in flat])
    distinct = pc.unique(quantiles)
    labels = pa.array([go_float_text(quantile) for quantile in distinct.to_pylist()], pa.string())
    keys = labels.take(pc.index_in(quantiles, value_set=distinct))
    values = float64s([percentile.value for percentile in flat])
    return pa.MapArray.from_arrays(offsets(map(len, lists)), keys, values, type=E2E_TYPE)


def _same(value, count: int, type_: pa.DataType) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), count)


def _batch(columns: dict[str, pa.Array]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([columns[field.name] for field in RAW_SCHEMA], schema=RAW_SCHEMA)


def _numbers(topics: list[TopicStats], channels: list[ChannelStats]) -> dict[str, pa.Array]:
    """The columns of numbers of the topic rows, then the channel rows (0 where a topic has none)."""
    zeros = [0] * len(topics)
    return {
        "depth": int64s([topic.depth for topic in topics] + [channel.depth for channel in channels]),
        "backend_depth": int64s([topic.backend_depth for topic in topics]
                                + [channel.backend_depth for channel in channels]),
        "in_flight": int64s(zeros + [channel.in_flight_count for channel in channels]),
        "deferred": int64s(zeros + [channel.deferred_count for channel in channels]),
        "message_count": int64s([topic.message_count for topic in topics]
                                + [channel.message_count for channel in channels]),
        "requeue_count": int64s(zeros + [channel.requeue_count for channel in channels]),
        "timeout_count": int64s(zeros + [channel.timeout_count for channel in channels]),
        "client_count": int64s(zeros + [channel.client_count for channel in channels]),
        "paused": pa.array([topic.paused for topic in topics] + [channel.paused for channel in channels],
                           pa.bool_()),
        "e2e_ns": e2e_maps(topics + channels),
    }


class PollRows:
    """The rows of one poll, gathered node by node, then turned into a table."""

    def __init__(self, ts_us: int):
        self.ts_us = ts_us
        self.nodes: list[str] = []  # the nodes that answered
        self.topic_counts: list[int] = []  # each answered node's count of topics
        self.topics: list[TopicStats] = []  # every answered node's topics, node by node
        self.missing: list[str] = []

    def add_node(self, node: str, stats: NodeStats) -> None:
        topics = stats.topics or ()
        self.nodes.append(node)
        self.topic_counts.append(len(topics))
        self.topics += topics

    def add_missing(self, node: str) -> None:
        self.missing.append(node)

    def _answered_batch(self) -> pa.RecordBatch:
        """Every topic's row, then every channel's row, node by node."""
        topics = self.topics
        channel_lists = [topic.channels or () for topic in topics]
        channels = list(chain.from_iterable(channel_lists))
        topic_of_channel = parents(map(len, channel_lists))
        node_of_topic = parents(self.topic_counts)
        names = pa.array([topic.topic_name for topic in topics], pa.string())
        rows = len(topics) + len(channels)
        return _batch(_numbers(topics, channels) | {
            "ts": _same(self.ts_us, rows, TS_TYPE),
            "missing": _same(False, rows, pa.bool_()),
            "node": pa.array(self.nodes, pa.string()).take(
                pa.concat_arrays([node_of_topic, node_of_topic.take(topic_of_channel)])),
            "topic": pa.concat_arrays([names, names.take(topic_of_channel)]),
            "channel": pa.concat_arrays([_same("", len(topics), pa.string()),
                                         pa.array([channel.channel_name for channel in channels], pa.string())]),
        })

    def _missing_batch(self) -> pa.RecordBatch:
        count = len(self.missing)
        columns = {field.name: pa.nulls(count, field.type) for field in RAW_SCHEMA}
        return _batch(columns | {"ts": _same(self.ts_us, count, TS_TYPE), "node": pa.array(self.missing, pa.string()),
                                 "missing": _same(True, count, pa.bool_())})

    def table(self) -> pa.Table:
        """The rows as a RAW_SCHEMA table: topic rows, channel rows, then missing nodes."""
        return pa.Table.from_batches([self._answered_batch(), self._missing_batch()], schema=RAW_SCHEMA)
