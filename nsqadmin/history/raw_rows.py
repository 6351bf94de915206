"""nsqd's ``/stats`` as the recorder reads it, and one poll's raw rows (layout.RAW_SCHEMA) as an Arrow table.

Theory of operation. A poll of 10 nsqd x 200 channels is 2,400 rows, so what counts is
the cost per row, measured on the 2-core test machine in instructions (valgrind) and CPU
time (bench/bench_recorder.py).

- Decoding: msgspec decodes only the fields the rows need, straight into structs, in a
  fifth of json.loads' time; pyarrow's JSON reader takes five times longer than msgspec
  for these nested documents, even for the channels alone. The structs are acyclic, so
  they skip the garbage collector (gc=False). A value of the wrong type is a precise
  error (``Expected `int`, got `str` - at `$.topics[0].depth```) that makes that node a
  missing one, never a file that cannot be written later. Counts are decoded as plain
  ints, as checking every one against int64's bounds costs 6% of the decoding; one
  beyond them cannot be packed, and the node's answer is then decoded again with the
  bounds, for msgspec to say where it is.
- Packing: each node's rows are packed right after its answer is decoded, and its
  decoded /stats freed then. A number column is one list comprehension and one
  ``struct.pack`` (whose bytes become the Arrow buffer): a comprehension reads a struct
  field twice as fast as map(attrgetter), and ``struct.pack`` packs a list four times as
  fast as ``pa.array``; reading a struct's fields as a tuple (msgspec.structs.astuple) or
  a row at a time costs more. What repeats (``ts``, ``missing``, a topic row's zeros) is
  bytes multiplied.
- The layout: which node, topic and channel each row is, and the quantile of each e2e
  percentile, changes only when the cluster's topics or channels do. The columns that
  follow from it (the names, the e2e keys and offsets) are built once and reused while
  a poll's layout is the one before; comparing two layouts costs a tenth of building
  them, as each pyarrow call costs as much as reading a field of 500 structs.

Rows of a poll: one per topic (channel ``""``), one per channel, one per missing node.
A topic's own row has nsqd's topic values: depth, backend_depth, message_count, paused
and e2e (the merge of its channels'); nsqd has no in_flight, deferred, requeue, timeout
or client counts for a topic, so those are 0 on its row: a node that answered has
numbers on every row, and null always means "the node did not answer".
"""

import functools
import operator
import struct
from decimal import Decimal
from itertools import accumulate, chain
from typing import Annotated, NamedTuple

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from .layout import RAW_SCHEMA

TS_TYPE = RAW_SCHEMA.field("ts").type
E2E_TYPE = RAW_SCHEMA.field("e2e_ns").type
INT32 = struct.Struct("i")
INT64_COLUMNS = ("depth", "backend_depth", "in_flight", "deferred", "message_count", "requeue_count",
                 "timeout_count", "client_count")


def _stats_struct(count: type) -> type:
    """The struct of the part of nsqd's /stats the recorder reads, its counts of type ``count``."""

    class Percentile(msgspec.Struct, gc=False):
        quantile: float = 0.0
        value: float = 0.0

    class Latency(msgspec.Struct, gc=False):
        percentiles: list[Percentile] | None = None

    class ChannelStats(msgspec.Struct, gc=False):
        channel_name: str = ""
        depth: count = 0
        backend_depth: count = 0
        in_flight_count: count = 0
        deferred_count: count = 0
        message_count: count = 0
        requeue_count: count = 0
        timeout_count: count = 0
        client_count: count = 0
        paused: bool = False
        e2e_processing_latency: Latency | None = None

    class TopicStats(msgspec.Struct, gc=False):
        topic_name: str = ""
        channels: list[ChannelStats] | None = None
        depth: count = 0
        backend_depth: count = 0
        message_count: count = 0
        paused: bool = False
        e2e_processing_latency: Latency | None = None

    class NodeStats(msgspec.Struct, gc=False):
        start_time: count = 0
        topics: list[TopicStats] | None = None

    return NodeStats


decode_stats = msgspec.json.Decoder(_stats_struct(int)).decode
decode_bounded_stats = msgspec.json.Decoder(
    _stats_struct(Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)])).decode


@functools.lru_cache(maxsize=256)
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


class NodeRows(NamedTuple):
    """A node's rows, packed: its topics' rows, then its channels' rows. The first SHAPE fields
    are its part of the poll's layout."""

    node: str
    topics: list[str]
    channel_counts: list[int]  # per topic
    channels: list[str]  # per row, "" on a topic's row
    e2e_counts: list[int]  # per row, its count of percentiles
    quantiles: bytes  # float64s per percentile
    count: int
    numbers: tuple[bytes, ...]  # int64s per row, a column of INT64_COLUMNS each
    paused: bytes  # a byte per row
    e2e_values: bytes
    start_time: bytes  # the node's start_time as an int64, repeated on each of its rows


SHAPE = 6


def node_rows(node: str, stats) -> NodeRows:
    """The rows of a node's decoded /stats; struct.error if a count is beyond int64."""
    topics = stats.topics or ()
    channel_lists = [topic.channels or () for topic in topics]
    channels = list(chain.from_iterable(channel_lists))
    count = len(topics) + len(channels)
    both, only, zeros = f"{count}q", f"{len(channels)}q", bytes(8 * len(topics))
    lists = [(latency.percentiles or ()) if (latency := topic.e2e_processing_latency) is not None else ()
             for topic in topics]
    lists += [(latency.percentiles or ()) if (latency := channel.e2e_processing_latency) is not None else ()
              for channel in channels]
    percentiles = list(chain.from_iterable(lists))
    return NodeRows(
        node, [topic.topic_name for topic in topics], list(map(len, channel_lists)),
        [""] * len(topics) + [channel.channel_name for channel in channels], list(map(len, lists)),
        struct.pack(f"{len(percentiles)}d", *[percentile.quantile for percentile in percentiles]),
        count,
        (struct.pack(both, *[topic.depth for topic in topics], *[channel.depth for channel in channels]),
         struct.pack(both, *[topic.backend_depth for topic in topics],
                     *[channel.backend_depth for channel in channels]),
         zeros + struct.pack(only, *[channel.in_flight_count for channel in channels]),
         zeros + struct.pack(only, *[channel.deferred_count for channel in channels]),
         struct.pack(both, *[topic.message_count for topic in topics],
                     *[channel.message_count for channel in channels]),
         zeros + struct.pack(only, *[channel.requeue_count for channel in channels]),
         zeros + struct.pack(only, *[channel.timeout_count for channel in channels]),
         zeros + struct.pack(only, *[channel.client_count for channel in channels])),
        struct.pack(f"{count}?", *[topic.paused for topic in topics], *[channel.paused for channel in channels]),
        struct.pack(f"{len(percentiles)}d", *[percentile.value for percentile in percentiles]),
        struct.pack("q", stats.start_time))


class Layout:
    """The last poll's layout and the columns that follow from it, reused by the next poll while
    its layout is the same (see the module's docstring)."""

    def __init__(self):
        self._shapes: list[tuple] | None = None
        self._columns: dict[str, pa.Array] = {}

    def columns(self, nodes: list[NodeRows]) -> dict[str, pa.Array]:
        shapes = [rows[:SHAPE] for rows in nodes]
        if shapes != self._shapes:
            self._shapes, self._columns = shapes, _layout_columns(nodes)
        return self._columns


class PollRows:
    """The rows of one poll, node by node, then turned into a table."""

    def __init__(self, ts_us: int, layout: Layout | None = None):
        self.ts_us = ts_us
        self.layout = layout or Layout()
        self.answered: list[NodeRows] = []
        self.missing: list[str] = []

    def add_answer(self, node: str, body: bytes) -> None:
        """The rows of a node's /stats answer; ValueError (msgspec's, saying where) if it is not nsqd's."""
        try:
            self.answered.append(node_rows(node, decode_stats(body)))
        except struct.error:  # a count beyond int64
            decode_bounded_stats(body)
            raise ValueError("a count is beyond int64") from None

    def add_missing(self, node: str) -> None:
        self.missing.append(node)

    def table(self) -> pa.Table:
        """The rows as a RAW_SCHEMA table: each answered node's topic rows and channel rows, then
        a row per missing node."""
        batches = [batch() for rows, batch in ((self.answered, self._answered_batch),
                                               (self.missing, self._missing_batch)) if rows]
        return pa.Table.from_batches(batches, schema=RAW_SCHEMA)

    def _answered_batch(self) -> pa.RecordBatch:
        nodes = self.answered
        count = sum(rows.count for rows in nodes)
        layout = self.layout.columns(nodes)
        paused = b"".join(rows.paused for rows in nodes)
        values = b"".join(rows.e2e_values for rows in nodes)
        columns = {name: _from_bytes(pa.int64(), count, b"".join(rows.numbers[n] for rows in nodes))
                   for n, name in enumerate(INT64_COLUMNS)}
        return _batch(columns | {
            "ts": _from_bytes(TS_TYPE, count, struct.pack("q", self.ts_us) * count),
            "start_time": _from_bytes(pa.int64(), count, b"".join(rows.start_time * rows.count for rows in nodes)),
            "node": layout["node"],
            "topic": layout["topic"],
            "channel": layout["channel"],
            "missing": layout["falses"],
            "paused": _from_bytes(pa.uint8(), count, paused).cast(pa.bool_()) if 1 in paused else layout["falses"],
            "e2e_ns": pa.MapArray.from_arrays(layout["e2e_offsets"], layout["e2e_keys"],
                                              _from_bytes(pa.float64(), len(values) // 8, values), type=E2E_TYPE),
        })

    def _missing_batch(self) -> pa.RecordBatch:
        count = len(self.missing)
        columns = {field.name: pa.nulls(count, field.type) for field in RAW_SCHEMA}
        return _batch(columns | {"ts": _from_bytes(TS_TYPE, count, struct.pack("q", self.ts_us) * count),
                                 "node": pa.array(self.missing, pa.string()),
                                 "missing": pa.array([True] * count, pa.bool_())})


def _layout_columns(nodes: list[NodeRows]) -> dict[str, pa.Array]:
    """The columns that follow from the nodes' layout. Each e2e percentile's key is its
    quantile's %v text, computed once per distinct quantile (a cluster has a handful) and
    spread by Arrow."""
    count = sum(rows.count for rows in nodes)
    topic_index, first = [], 0
    for rows in nodes:
        index = list(map(INT32.pack, range(first, first + len(rows.topics))))
        topic_index += index
        topic_index.append(b"".join(map(operator.mul, index, rows.channel_counts)))
        first += len(rows.topics)
    quantiles = b"".join(rows.quantiles for rows in nodes)
    distinct = pc.dictionary_encode(_from_bytes(pa.float64(), len(quantiles) // 8, quantiles))
    labels = pa.array([go_float_text(quantile) for quantile in distinct.dictionary.to_pylist()], pa.string())
    e2e_counts = chain.from_iterable(rows.e2e_counts for rows in nodes)
    return {
        "node": pa.array([rows.node for rows in nodes], pa.string()).take(
            _from_bytes(pa.int32(), count, b"".join(INT32.pack(n) * rows.count for n, rows in enumerate(nodes)))),
        "topic": pa.array(list(chain.from_iterable(rows.topics for rows in nodes)), pa.string()).take(
            _from_bytes(pa.int32(), count, b"".join(topic_index))),
        "channel": pa.array(list(chain.from_iterable(rows.channels for rows in nodes)), pa.string()),
        "falses": _from_bytes(pa.bool_(), count, bytes((count + 7) // 8)),
        "e2e_offsets": _from_bytes(pa.int32(), count + 1,
                                   struct.pack(f"{count + 1}i", *accumulate(e2e_counts, initial=0))),
        "e2e_keys": labels.take(distinct.indices),
    }


def _from_bytes(type_: pa.DataType, count: int, data: bytes) -> pa.Array:
    """An Arrow array of ``count`` fixed-width values (no nulls) whose buffer is ``data``."""
    return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(data)])


def _batch(columns: dict[str, pa.Array]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([columns[field.name] for field in RAW_SCHEMA], schema=RAW_SCHEMA)
