"""Raw stats snapshots for the rollup benchmark and tests: N nodes x C channels (over T topics) x H hours.

    python bench/history_data.py --out DIR [--nodes 10] [--channels 200] [--topics 20] [--hours 24] [--flushes]
    python bench/history_data.py --out DIR --append-minute

The first form writes H hours of 10-second snapshots starting at 2026-01-01 00:00 UTC into
DIR/raw (layout.RAW_SCHEMA, layout paths), one Parquet file per hour directory, as the rollup
job's compaction leaves closed hours; with --flushes, one file per minute instead, its rows in
poll order, as nsqadmin's recorder leaves them when no rollup has run yet (it flushes every
minute). The second appends the next minute as one small new file, as nsqadmin's recorder
writes between two scheduled rollups.

Rows: H x 360 snapshots x N x (C + T): one row per channel and one per topic (channel ""),
never a missing node. The defaults (24 h, 10 nodes, 200 channels over 20 topics) make
8,640 x 10 x 220 = 19,008,000 rows; an appended minute adds 6 x N x (C + T) = 13,200.

Theory of operation. A series is one (node, topic, channel) across snapshots. Its parameters
(publish rate, consumers, ...) are drawn once from a seeded generator, so the same shape always
gives the same series. A chunk (an hour, or the appended minute) is built as flat pyarrow
columns in series-major order: series 0's snapshots, then series 1's, ..., which turns every
per-series running total into one cumulative sum over the chunk minus each series' sum before
its first row; an hour is then written sorted and grouped as compaction writes it. Counters and backlogs carry from chunk to chunk through the last value of each series,
which ``append_minute`` reads back from the newest snapshot on disk.

The values behave like NSQ's: every channel of a topic on a node receives each message
published to the topic there, so topic and channel message counters advance together, at
rates log-uniform between 0.2 and 2,000 msg/s per topic and node; requeues and timeouts are
small fractions of them. Each nsqd restarts once a day (node n at (5n mod 24):30): its
counters start again from 0 and its start_time is the restart's time. Depth wanders along a sine with its own period and phase plus
noise, except in the channels that hold messages: 1 in 40 has no consumer and 1 in 97 is
paused, and their depth grows by every message. Topic rows have depth 0 (their channels take
the messages) and 0 for what nsqd does not report for topics.
"""

import argparse
import functools
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsqadmin.history import compaction, layout  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
SNAPSHOT_SECONDS = 10
SNAPSHOTS_PER_HOUR = 3600 // SNAPSHOT_SECONDS
SNAPSHOTS_PER_MINUTE = 60 // SNAPSHOT_SECONDS
RESTART_SECOND_OF_HOUR = 1800
MEM_QUEUE_SIZE = 10_000  # nsqd's default --mem-queue-size: depth beyond it is on disk
E2E_QUANTILES = pa.array(["0.99", "0.95"])
SEED = 10


@dataclass(frozen=True)
class ClusterShape:
    nodes: int
    channels: int
    topics: int

    @property
    def rows_per_snapshot(self) -> int:
        return self.nodes * (self.channels + self.topics)

    def rows(self, hours: int) -> int:
        return hours * SNAPSHOTS_PER_HOUR * self.rows_per_snapshot


@dataclass(frozen=True)
class Series:
    """Every series' fixed parameters, one array element per series, in (node, topic, channel) order."""
    node: pa.Array
    topic: pa.Array
    channel: pa.Array
    restart_hour: pa.Array
    topic_series: pa.Array  # the series of the topic's own row on the same node
    publish_rate: pa.Array
    requeue_fraction: pa.Array
    timeout_fraction: pa.Array
    clients: pa.Array
    paused: pa.Array
    holds_messages: pa.Array
    depth_amplitude: pa.Array
    depth_period: pa.Array
    depth_phase: pa.Array
    e2e_p99: pa.Array

    def __len__(self) -> int:
        return len(self.node)


@dataclass(frozen=True)
class Carry:
    """The last value of each series' counters and backlog, where the next chunk continues."""
    message_count: pa.Array
    requeue_count: pa.Array
    timeout_count: pa.Array
    depth: pa.Array

    @classmethod
    def zero(cls, series: int) -> "Carry":
        zeros = pa.repeat(0, series).cast(pa.int64())
        return cls(zeros, zeros, zeros, zeros)


@dataclass(frozen=True)
class Grid:
    """Row indices of a chunk of ``snapshots`` snapshots of ``series`` series, series-major."""
    series_index: pa.Array
    snapshot_index: pa.Array
    first_row: pa.Array  # of the row's series
    last_rows: pa.Array  # one per series
    snapshots: int


def width(count: int) -> int:
    """Digits that number ``count`` things with zero padding, so that name order is numeric order."""
    return len(str(count - 1))


def names(shape: ClusterShape) -> list[tuple[int, int, int | None]]:
    """(node, topic, channel or None for the topic's row) in the order the files are sorted: names
    are zero-padded (see :func:`width`) and the topic's row ("") comes first."""
    rows = []
    for node in range(shape.nodes):
        for topic in range(shape.topics):
            rows.append((node, topic, None))
            rows.extend((node, topic, channel) for channel in range(topic, shape.channels, shape.topics))
    return rows


def build_series(shape: ClusterShape) -> Series:
    rng = random.Random(SEED)
    topic_rate = [10 ** rng.uniform(math.log10(0.2), math.log10(2000)) for _ in range(shape.topics)]
    rows = names(shape)
    topic_series = {}
    for index, (node, topic, channel) in enumerate(rows):
        if channel is None:
            topic_series[node, topic] = index
    columns: dict[str, list] = {field: [] for field in Series.__dataclass_fields__}
    for node, topic, channel in rows:
        is_channel = channel is not None
        rate = topic_rate[topic] * rng.uniform(0.8, 1.2)
        paused = is_channel and channel % 97 == 13
        no_consumer = is_channel and channel % 40 == 39
        columns["node"].append(f"nsqd-{node:0{width(shape.nodes)}}:4151")
        columns["topic"].append(f"topic-{topic:0{width(shape.topics)}}")
        columns["channel"].append(f"channel-{channel:0{width(shape.channels)}}" if is_channel else "")
        columns["restart_hour"].append(5 * node % 24)
        columns["topic_series"].append(topic_series[node, topic])
        columns["publish_rate"].append(rate)
        consumed = is_channel and not (paused or no_consumer)
        columns["requeue_fraction"].append(rng.uniform(0, 0.02) if consumed else 0.0)
        columns["timeout_fraction"].append(rng.uniform(0, 0.005) if consumed else 0.0)
        columns["clients"].append(rng.randint(1, 4) if is_channel and not no_consumer else 0)
        columns["paused"].append(paused)
        columns["holds_messages"].append(paused or no_consumer)
        columns["depth_amplitude"].append(rate * rng.uniform(0, 30) if is_channel else 0.0)
        columns["depth_period"].append(rng.uniform(1200, 10800))
        columns["depth_phase"].append(rng.uniform(0, 2 * math.pi))
        columns["e2e_p99"].append(rng.uniform(1e6, 5e8))
    return Series(**{field: pa.array(values) for field, values in columns.items()})


@functools.lru_cache(maxsize=4)
def grid(series: int, snapshots: int) -> Grid:
    rows = pa.array(range(series * snapshots), pa.int64())
    series_index = pc.divide(rows, snapshots)
    first_row = pc.multiply(series_index, snapshots)
    last_rows = pa.array(range(snapshots - 1, series * snapshots, snapshots), pa.int64())
    return Grid(series_index, pc.subtract(rows, first_row), first_row, last_rows, snapshots)


def per_row(grid: Grid, values: pa.Array) -> pa.Array:
    """A per-series value on every row of its series."""
    return pc.take(values, grid.series_index)


def running_total(grid: Grid, increments: pa.Array) -> pa.Array:
    """Each row's sum of its series' increments from the chunk's start, itself included."""
    total = pc.cumulative_sum(increments)
    before_series = pc.subtract(pc.take(total, grid.first_row), pc.take(increments, grid.first_row))
    return pc.subtract(total, before_series)


def counter(grid: Grid, increments: pa.Array, carried: pa.Array, restart: pa.Array, restart_at: int) -> pa.Array:
    """A cumulative counter continuing from ``carried``; rows in ``restart`` count again from 0 at
    snapshot ``restart_at`` (nsqd restarted)."""
    since_chunk = running_total(grid, increments)
    continued = pc.add(since_chunk, per_row(grid, carried))
    if restart_at == 0:
        return pc.if_else(restart, since_chunk, continued)
    before_restart = pc.take(since_chunk, pc.add(grid.first_row, restart_at - 1))
    return pc.if_else(restart, pc.subtract(since_chunk, before_restart), continued)


def whole(values: pa.Array) -> pa.Array:
    return pc.cast(pc.floor(values), pa.int64())


def restarts(series: Series, grid: Grid, start: datetime) -> tuple[pa.Array, int]:
    """Which rows come after their nsqd's daily restart within the chunk, and the snapshot it falls on."""
    offset = start.minute * 60 + start.second
    if not offset <= RESTART_SECOND_OF_HOUR < offset + grid.snapshots * SNAPSHOT_SECONDS:
        return pa.repeat(False, len(grid.series_index)), 0
    restart_at = (RESTART_SECOND_OF_HOUR - offset) // SNAPSHOT_SECONDS
    on_restarting_node = pc.equal(per_row(grid, series.restart_hour), start.hour)
    return pc.and_(on_restarting_node, pc.greater_equal(grid.snapshot_index, restart_at)), restart_at


def chunk(series: Series, start: datetime, snapshots: int, carry: Carry) -> tuple[pa.Table, Carry]:
    """``snapshots`` snapshots from ``start`` (within one hour) as a RAW_SCHEMA table, and the new carry."""
    if start.minute * 60 + start.second + snapshots * SNAPSHOT_SECONDS > 3600:
        raise ValueError(f"a chunk must stay within one hour: {snapshots} snapshots from {start:%H:%M:%S}")
    g = grid(len(series), snapshots)
    rows = len(g.series_index)
    noise = pc.random(6 * rows, initializer=int(start.timestamp()))
    published_noise, retry_noise, depth_noise, in_flight_noise, deferred_noise, e2e_noise = (
        noise.slice(rows * stream, rows) for stream in range(6))
    offsets = pc.multiply(g.snapshot_index, SNAPSHOT_SECONDS)
    published = published_messages(series, g, published_noise)
    message_count, requeue_count, timeout_count = counters(series, g, start, carry, published, retry_noise)
    seconds = pc.add(pc.cast(offsets, pa.float64()), start.timestamp())
    depth = pc.if_else(per_row(g, series.holds_messages),
                       pc.add(running_total(g, published), per_row(g, carry.depth)),
                       wandering_depth(series, g, seconds, depth_noise))
    clients = per_row(g, series.clients)
    working = pc.and_(pc.greater(clients, 0), pc.invert(per_row(g, series.paused)))
    in_flight = pc.if_else(working, whole(pc.multiply(pc.multiply(clients, 20), in_flight_noise)), 0)
    deferred = pc.if_else(working, whole(pc.multiply(pc.max_element_wise(pc.subtract(deferred_noise, 0.95), 0), 200)), 0)
    p99 = pc.multiply(per_row(g, series.e2e_p99), pc.add(pc.multiply(e2e_noise, 0.4), 0.8))
    table = pa.Table.from_arrays([
        pc.cast(pc.add(pc.multiply(offsets, 1_000_000), int(start.timestamp() * 1_000_000)),
                layout.RAW_SCHEMA.field("ts").type),
        per_row(g, series.node), per_row(g, series.topic), per_row(g, series.channel),
        pa.repeat(False, rows),
        depth, pc.max_element_wise(pc.subtract(depth, MEM_QUEUE_SIZE), 0), in_flight, deferred,
        message_count, requeue_count, timeout_count, clients, per_row(g, series.paused),
        e2e_map(p99, pc.multiply(p99, 0.5)),
        start_times(series, g, seconds),
    ], schema=layout.RAW_SCHEMA)
    return table, Carry(*(pc.take(column, g.last_rows)
                          for column in (message_count, requeue_count, timeout_count, depth)))


def start_times(series: Series, g: Grid, seconds: pa.Array) -> pa.Array:
    """Each row's nsqd start_time: its node's last daily restart at or before the row's time."""
    whole_seconds = whole(seconds)
    midnight = pc.multiply(pc.divide(whole_seconds, 86400), 86400)
    today = pc.add(midnight, pc.add(pc.multiply(per_row(g, series.restart_hour), 3600), RESTART_SECOND_OF_HOUR))
    return pc.if_else(pc.greater_equal(whole_seconds, today), today, pc.subtract(today, 86400))


def published_messages(series: Series, g: Grid, noise: pa.Array) -> pa.Array:
    """Messages published to each row's topic on its node since the previous snapshot: every channel
    row gets the same number as its topic's row."""
    per_snapshot = pc.multiply(per_row(g, series.publish_rate), SNAPSHOT_SECONDS)
    published = whole(pc.multiply(per_snapshot, pc.add(noise, 0.5)))
    topic_row = pc.add(pc.multiply(per_row(g, series.topic_series), g.snapshots), g.snapshot_index)
    return pc.take(published, topic_row)


def counters(series: Series, g: Grid, start: datetime, carry: Carry, published: pa.Array,
             noise: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """message_count, requeue_count and timeout_count, continued from ``carry`` or restarted with nsqd."""
    restart, restart_at = restarts(series, g, start)
    retries = pc.multiply(pc.cast(published, pa.float64()), pc.multiply(noise, 2.0))
    requeued = whole(pc.multiply(retries, per_row(g, series.requeue_fraction)))
    timed_out = whole(pc.multiply(retries, per_row(g, series.timeout_fraction)))
    return tuple(counter(g, increments, carried, restart, restart_at) for increments, carried in (
        (published, carry.message_count), (requeued, carry.requeue_count), (timed_out, carry.timeout_count)))


def wandering_depth(series: Series, g: Grid, seconds: pa.Array, noise: pa.Array) -> pa.Array:
    """A backlog that rises and falls with the series' own period, plus noise of a tenth of its swing."""
    angle = pc.add(pc.divide(pc.multiply(seconds, 2 * math.pi), per_row(g, series.depth_period)),
                   per_row(g, series.depth_phase))
    swing = pc.multiply(pc.add(pc.sin(angle), 1.0), 0.5)
    amplitude = per_row(g, series.depth_amplitude)
    return whole(pc.multiply(amplitude, pc.add(swing, pc.multiply(noise, 0.1))))


def e2e_map(p99: pa.Array, p95: pa.Array) -> pa.Array:
    """Each row's {"0.99": p99, "0.95": p95}, as nsqd reports e2e processing latency percentiles."""
    offsets, quantiles, interleave = e2e_layout(len(p99))
    return pa.MapArray.from_arrays(offsets, quantiles, pc.take(pa.concat_arrays([p99, p95]), interleave),
                                   type=layout.RAW_SCHEMA.field("e2e_ns").type)


@functools.lru_cache(maxsize=4)
def e2e_layout(rows: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Map offsets (two entries a row), their keys, and the order [0, rows, 1, rows + 1, ...] that
    picks each row's p99 and p95 in turn from the two arrays concatenated."""
    entries = pa.array(range(2 * rows), pa.int64())
    row = pc.shift_right(entries, 1)
    second = pc.bit_wise_and(entries, 1)
    return (pa.array(range(0, 2 * rows + 1, 2), pa.int32()), pc.take(E2E_QUANTILES, second),
            pc.add(row, pc.multiply(second, rows)))


def compacted_name() -> str:
    """The name compaction gives a closed hour's one file."""
    return f"compacted-{os.urandom(8).hex()}.parquet"


def recorded_name(start: datetime) -> str:
    """The name nsqadmin's recorder gives a file whose first snapshot is at ``start``."""
    return f"{start:%Y%m%dT%H%M%S}-{os.urandom(4).hex()}.parquet"


def write_snapshots(stats_dir: Path, table: pa.Table, start: datetime, name: str, compacted: bool) -> Path:
    """Publish ``table`` as the new file ``name`` in the raw hour directory of ``start``, as
    compaction writes a closed hour or as the recorder writes a flush."""
    directory = layout.raw_partition(stats_dir, start)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / name
    temporary = layout.hidden_twin(final)
    if compacted:
        compaction.write_compacted(table, temporary)
    else:
        pq.write_table(table, temporary)
    layout.publish(temporary, final)
    return final


def generate(stats_dir: str | Path, shape: ClusterShape, hours: int, start: datetime = START,
             flushes: bool = False) -> int:
    """Write ``hours`` hours of snapshots, one compacted file per hour directory (with ``flushes``,
    one recorder's file per minute); the number of rows written."""
    stats_dir = Path(stats_dir)
    if layout.visible_files(layout.raw_dir(stats_dir)):
        raise ValueError(f"{layout.raw_dir(stats_dir)} already holds snapshots: generate into an empty directory")
    series = build_series(shape)
    carry = Carry.zero(len(series))
    written = 0
    per_file = SNAPSHOTS_PER_MINUTE if flushes else SNAPSHOTS_PER_HOUR
    for n in range(hours * SNAPSHOTS_PER_HOUR // per_file):
        file_start = start + timedelta(seconds=n * per_file * SNAPSHOT_SECONDS)
        table, carry = chunk(series, file_start, per_file, carry)
        if flushes:
            write_snapshots(stats_dir, in_poll_order(table), file_start, recorded_name(file_start), compacted=False)
        else:
            write_snapshots(stats_dir, table, file_start, compacted_name(), compacted=True)
        written += table.num_rows
    return written


def in_poll_order(table: pa.Table) -> pa.Table:
    """A chunk's rows as the recorder writes them: poll by poll, each in the series' order."""
    return table.take(pc.sort_indices(table["ts"]))


def append_minute(stats_dir: str | Path) -> tuple[Path, int]:
    """Write the minute after the newest snapshot as one small new file; its path and row count."""
    shape, newest, carry = newest_snapshot(Path(stats_dir))
    start = newest + timedelta(seconds=SNAPSHOT_SECONDS)
    table, _ = chunk(build_series(shape), start, SNAPSHOTS_PER_MINUTE, carry)
    return write_snapshots(Path(stats_dir), table, start, recorded_name(start), compacted=False), table.num_rows


def newest_snapshot(stats_dir: Path) -> tuple[ClusterShape, datetime, Carry]:
    """The shape, time and carry of the newest snapshot of a data set this module generated."""
    files = layout.visible_files(layout.raw_dir(stats_dir))
    if not files:
        raise ValueError(f"{layout.raw_dir(stats_dir)} holds no snapshots to continue: generate them first")
    newest_hour = [path for path in files if path.parent == files[-1].parent]
    table = pq.read_table(newest_hour, schema=layout.RAW_SCHEMA)
    newest = pc.max(table["ts"])
    snapshot = table.filter(pc.equal(table["ts"], newest)).sort_by(
        [("node", "ascending"), ("topic", "ascending"), ("channel", "ascending")])
    shape = shape_of(snapshot)
    series = build_series(shape)
    for column in ("node", "topic", "channel"):
        if not snapshot[column].combine_chunks().equals(getattr(series, column)):
            raise ValueError(f"{stats_dir} does not hold a data set this generator made: its {column}s differ")
    return shape, newest.as_py(), Carry(*(snapshot[column].combine_chunks() for column in
                                          ("message_count", "requeue_count", "timeout_count", "depth")))


def shape_of(snapshot: pa.Table) -> ClusterShape:
    nodes = len(pc.unique(snapshot["node"]))
    topics = pc.sum(pc.equal(snapshot["channel"], "")).as_py() // nodes
    return ClusterShape(nodes, snapshot.num_rows // nodes - topics, topics)


def retention_keeping(start: datetime = START) -> str:
    """A --stats-retention (a Go duration) under which the rollup job keeps every snapshot since
    ``start`` for two more days: the data sets start on a fixed day, long past the default 168h."""
    hours = math.ceil((datetime.now(timezone.utc) - start).total_seconds() / 3600) + 48
    return f"{hours}h"


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="the stats dir: snapshots go to OUT/raw")
    parser.add_argument("--nodes", type=positive, default=10)
    parser.add_argument("--channels", type=positive, default=200)
    parser.add_argument("--topics", type=positive, default=20, help="the channels are spread evenly over them")
    parser.add_argument("--hours", type=positive, default=24)
    parser.add_argument("--flushes", action="store_true",
                        help="a file per minute in poll order, as the recorder writes them, not one per hour")
    parser.add_argument("--append-minute", action="store_true",
                        help="append the minute after the newest snapshot in OUT instead")
    args = parser.parse_args()
    if args.topics > args.channels:
        parser.error(f"--topics ({args.topics}) must not exceed --channels ({args.channels})")
    began = time.perf_counter()
    try:
        if args.append_minute:
            path, rows = append_minute(args.out)
            print(f"appended {rows:,} rows in {path} in {time.perf_counter() - began:.1f}s")
        else:
            rows = generate(args.out, ClusterShape(args.nodes, args.channels, args.topics), args.hours,
                            flushes=args.flushes)
            files = args.hours * (60 if args.flushes else 1)
            print(f"wrote {rows:,} rows in {files} files under {layout.raw_dir(args.out)} "
                  f"in {time.perf_counter() - began:.1f}s")
    except (ValueError, OSError) as error:
        parser.exit(1, f"history_data: {error}\n")


if __name__ == "__main__":
    main()
