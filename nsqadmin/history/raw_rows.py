"""nsqd's ``/stats`` as the recorder reads it, and one poll's raw rows (layout.RAW_SCHEMA) as an Arrow table.

Theory of operation. msgspec decodes only the fields the rows need, straight into typed
structs, in a third of json.loads' time or less (a 200-channel ``/stats``: ~0.3 ms against
~1 ms on the 2-core test machine). A value of the wrong type is a precise error
(``Expected `int`, got `str` - at `$.topics[0].depth```) that makes that node a missing
one, never a file that cannot be written later. The structs are acyclic, so they skip the
garbage collector (gc=False).

The rows are then built a column at a time, with C-level iteration (map, attrgetter)
over every node's topics and channels at once, as three Arrow batches (topic rows,
channel rows, missing nodes) whose constant columns Arrow fills itself: no dict per row,
no Python loop per row.

Rows of a poll: one per topic (channel ``""``), one per channel, one per missing node.
A topic's own row has nsqd's topic values: depth, backend_depth, message_count, paused
and e2e (the merge of its channels'); nsqd has no in_flight, deferred, requeue, timeout
or client counts for a topic, so those are 0 on its row: a node that answered has
numbers on every row, and null always means "the node did not answer".
"""

from decimal import Decimal
from itertools import accumulate, chain, repeat
from operator import attrgetter
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
TOPIC_COLUMNS = {"topic": "topic_name", "depth": "depth", "backend_depth": "backend_depth",
                 "message_count": "message_count", "paused": "paused"}
TOPIC_ZEROS = ("in_flight", "deferred", "requeue_count", "timeout_count", "client_count")
CHANNEL_COLUMNS = {"channel": "channel_name", "depth": "depth", "backend_depth": "backend_depth",
                   "in_flight": "in_flight_count", "deferred": "deferred_count", "message_count": "message_count",
                   "requeue_count": "requeue_count", "timeout_count": "timeout_count",
                   "client_count": "client_count", "paused": "paused"}


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


def e2e_maps(latencies: list[Latency | None]) -> pa.MapArray:
    """The e2e_ns column of rows with these latencies (an empty map where nsqd has none).

    Each percentile's key is its quantile's %v text, computed once per distinct quantile
    (a cluster has a handful) and spread over the rows by Arrow."""
    lists = [(latency.percentiles or ()) if latency is not None else () for latency in latencies]
    flat = list(chain.from_iterable(lists))
    quantiles = pa.array(list(map(attrgetter("quantile"), flat)), pa.float64())
    distinct = pc.unique(quantiles)
    labels = pa.array([go_float_text(quantile) for quantile in distinct.to_pylist()], pa.string())
    keys = labels.take(pc.index_in(quantiles, value_set=distinct))
    values = pa.array(list(map(attrgetter("value"), flat)), pa.float64())
    offsets = pa.array(list(accumulate(map(len, lists), initial=0)), pa.int32())
    return pa.MapArray.from_arrays(offsets, keys, values, type=E2E_TYPE)


def _same(value, count: int, type_: pa.DataType) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), count)


def _batch(columns: dict[str, pa.Array]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([columns[field.name] for field in RAW_SCHEMA], schema=RAW_SCHEMA)


def _fields(rows: list, fields: dict[str, str]) -> dict[str, pa.Array]:
    """Raw columns from the struct ``fields`` of ``rows``, one C-level pass per column."""
    return {column: pa.array(list(map(attrgetter(field), rows)), RAW_SCHEMA.field(column).type)
            for column, field in fields.items()}


class PollRows:
    """The rows of one poll, gathered node by node, then turned into a table."""

    def __init__(self, ts_us: int):
        self.ts_us = ts_us
        self.topics: list[TopicStats] = []
        self.topic_nodes: list[str] = []
        self.channels: list[ChannelStats] = []
        self.channel_nodes: list[str] = []
        self.channel_topics: list[str] = []
        self.missing: list[str] = []

    def add_node(self, node: str, stats: NodeStats) -> None:
        topics = stats.topics or ()
        self.topics += topics
        self.topic_nodes += repeat(node, len(topics))
        for topic in topics:
            channels = topic.channels or ()
            self.channels += channels
            self.channel_nodes += repeat(node, len(channels))
            self.channel_topics += repeat(topic.topic_name, len(channels))

    def add_missing(self, node: str) -> None:
        self.missing.append(node)

    def __len__(self) -> int:
        return len(self.topics) + len(self.channels) + len(self.missing)

    def _common(self, nodes: list[str], missing: bool) -> dict[str, pa.Array]:
        return {"ts": _same(self.ts_us, len(nodes), TS_TYPE), "node": pa.array(nodes, pa.string()),
                "missing": _same(missing, len(nodes), pa.bool_())}

    def _topic_batch(self) -> pa.RecordBatch:
        columns = self._common(self.topic_nodes, False) | _fields(self.topics, TOPIC_COLUMNS)
        columns["channel"] = _same("", len(self.topics), pa.string())
        columns |= {column: _same(0, len(self.topics), pa.int64()) for column in TOPIC_ZEROS}
        columns["e2e_ns"] = e2e_maps(list(map(attrgetter("e2e_processing_latency"), self.topics)))
        return _batch(columns)

    def _channel_batch(self) -> pa.RecordBatch:
        columns = self._common(self.channel_nodes, False) | _fields(self.channels, CHANNEL_COLUMNS)
        columns["topic"] = pa.array(self.channel_topics, pa.string())
        columns["e2e_ns"] = e2e_maps(list(map(attrgetter("e2e_processing_latency"), self.channels)))
        return _batch(columns)

    def _missing_batch(self) -> pa.RecordBatch:
        columns = {field.name: pa.nulls(len(self.missing), field.type) for field in RAW_SCHEMA}
        return _batch(columns | self._common(self.missing, True))

    def table(self) -> pa.Table:
        """The rows as a RAW_SCHEMA table: topic rows, channel rows, then missing nodes."""
        return pa.Table.from_batches([self._topic_batch(), self._channel_batch(), self._missing_batch()],
                                     schema=RAW_SCHEMA)
