"""nsqadmin's recorder: a snapshot of every nsqd's ``/stats`` every --stats-interval, kept in --stats-dir.

Theory of operation. The recorder is a task on nsqadmin's event loop, beside uvicorn, and
never blocks a page for long: its network waits are asynchronous, and the disk is written
in a worker thread (raw_writer). A poll of 10 nsqd x 200 channels costs 34 million
instructions (valgrind) and about 2 ms of CPU on the 2-core test machine, plus half a
millisecond to write its rows (bench/bench_recorder.py): decoding the answers (msgspec) is
60% of the instructions, packing their rows a third, asking the nsqd 3% of the instructions
but 15% of the time (the kernel's share).

- Ticks fall on wall-clock multiples of the interval; a poll's ``ts`` is its tick, the same
  for every node. A poll that outlasts the next tick does not queue ticks up: the missed
  ones are skipped (logged at debug).
- Nodes: with --lookupd-http-address, the producers of every lookupd's ``/nodes`` (when no
  lookupd answers, the nodes of the last listing are asked); with --nsqd-http-address,
  each address, named by its ``/info``, asked again only on a new connection (a restarted
  nsqd may have a new name; a running one keeps its connection). A node is
  ``producers.http_address``, the name the pages use.
- The lookupds are asked at most every LISTING_SECONDS of ticks, not at every poll: a
  listing through nsqadmin's HTTP client (httpx) and the merge of the lookupds' answers
  cost ~1-2 ms of CPU, a large part of a whole poll, for a cluster whose nodes rarely change.
  They are asked again at the next poll, however recent the listing, when a node did not
  answer (it may have left the cluster), when a lookupd failed, and when the last listing
  differed from the one before it (nodes starting up). So a node that joins is recorded
  within LISTING_SECONDS, and one that leaves and stops answering is recorded missing at
  one poll more than before. The lookupds keep being asked through ClusterInfo, the one place that merges
  their answers and words their failures, rather than through a second, lighter client.
- Each node's ``/stats?format=json&include_clients=false`` is asked once a poll, all at
  once (stats_fetcher); then the answers are decoded and packed in turn, in the nodes'
  order, so that each decoded ``/stats`` is freed before the next is decoded and a poll's
  rows are in the same order as the last poll's (raw_rows reuses what follows from it).
  A node that does not answer, or answers something that is not nsqd's ``/stats``, is
  one row with ``missing`` true (raw_rows). When no node answers,
  the poll says so with a warning and records only those missing rows: the nodes known
  from the previous poll. A node's failure is logged when it starts and when it ends,
  not at every poll.
- Rows are buffered (raw_writer) and flushed after a poll when the oldest buffered poll would
  otherwise be older than ``flush_every`` (flush_seconds: one --stats-interval or
  MIN_FLUSH_SECONDS, whichever is longer) at the next one, so at the default 10 s after
  every poll; also when FLUSH_ROWS are buffered, and at stop, before nsqadmin exits. So
  every snapshot is on disk, where any rollup run sees it and a crash of nsqadmin cannot
  take it, within ``flush_every`` of its time, whatever --rollup-interval is; the rollup job
  merges the small files (compaction.py). Before its first poll the recorder deletes the
  hidden files that flushes killed mid-way left behind (raw_writer).

Crash loss: buffered rows exist only in memory until flushed, so a crash (kill -9, power
loss) loses the polls of the last ``flush_every`` at most. A clean stop (SIGTERM, SIGINT)
loses nothing.
"""

import asyncio
import json
import logging
import time

from clusterinfo import producers as nodes
from clusterinfo.cluster import ClusterInfo, UpstreamFailure

from .raw_rows import Layout, PollRows
from .raw_writer import RawWriter, utc
from .stats_fetcher import FetchError, StatsFetcher

log = logging.getLogger("nsqadmin")

STATS_PATH = "/stats?format=json&include_clients=false"
FLUSH_ROWS = 500_000
MIN_FLUSH_SECONDS = 10.0
LISTING_SECONDS = 30


def flush_seconds(stats_interval: float) -> float:
    """The longest a snapshot waits in memory: one --stats-interval, or MIN_FLUSH_SECONDS if longer."""
    return max(stats_interval, MIN_FLUSH_SECONDS)


class Complaints:
    """Logs a failure when it starts and when it ends; repeats go to debug."""

    def __init__(self):
        self._failing: set[str] = set()

    def failed(self, what: str, message: str) -> None:
        if what in self._failing:
            log.debug("stats: %s", message)
            return
        self._failing.add(what)
        log.warning("stats: %s", message)

    def answered(self, what: str) -> None:
        if what in self._failing:
            self._failing.discard(what)
            log.info("stats: %s answers again", what)


class Recorder:
    """Polls the cluster every ``interval`` seconds into ``writer``; a snapshot is written within
    ``flush_every`` seconds of its time."""

    def __init__(self, ci: ClusterInfo, fetcher: StatsFetcher, writer: RawWriter, interval: float,
                 flush_every: float):
        self.ci = ci
        self.fetcher = fetcher
        self.writer = writer
        self.interval_ns = round(interval * 1e9)
        self.flush_every = flush_every
        self.complaints = Complaints()
        self._listed: list[str] = []  # the nodes of the last lookupd listing
        self._listed_at = 0  # the tick of that listing, in µs
        self._relist = True  # list again at the next poll, however recent the listing
        self._names: dict[str, tuple[str, int]] = {}  # --nsqd-http-address -> (its name, fetcher.connects)
        self._layout = Layout()  # the last poll's, reused by the next
        self._loop: asyncio.Task | None = None
        self._flushing: asyncio.Task | None = None

    def start(self) -> None:
        self._loop = asyncio.create_task(self._poll_every_tick())

    async def stop(self) -> None:
        """Stop polling and write what is buffered."""
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
        if self._flushing is not None:
            await self._flushing
        await self.writer.flush()
        self.fetcher.close()

    async def flush(self) -> None:
        await self.writer.flush()

    def _next_tick(self, after_ns: int) -> int:
        return (after_ns // self.interval_ns + 1) * self.interval_ns

    async def _poll_every_tick(self) -> None:
        try:
            await self.writer.remove_stale_temporaries()
        except Exception:  # a bug here must not end the history either
            log.exception("stats: looking for stale temporary files failed")
        tick = self._next_tick(time.time_ns())
        while True:
            await asyncio.sleep(max(0, tick - time.time_ns()) / 1e9)
            try:
                await self.poll(tick // 1000)
            except Exception:  # a bug in one poll must not end the history
                log.exception("stats: the poll at %s failed", utc(tick // 1000).isoformat())
            self._flush_if_due()
            following = self._next_tick(time.time_ns())
            skipped = (following - tick) // self.interval_ns - 1
            if skipped:
                log.debug("stats: the poll took longer than --stats-interval; skipped %d tick(s)", skipped)
            tick = following

    def _flush_if_due(self) -> None:
        """Flush now if the oldest buffered poll would be older than ``flush_every`` at the next tick."""
        if self._flushing is not None and not self._flushing.done():
            return
        oldest = self.writer.oldest_ts_us
        next_tick_us = self._next_tick(time.time_ns()) // 1000
        due = oldest is not None and next_tick_us - oldest >= self.flush_every * 1e6
        if self.writer.rows >= FLUSH_ROWS or due:
            self._flushing = asyncio.create_task(self.writer.flush())

    async def poll(self, ts_us: int) -> None:
        """Record one snapshot of the cluster at ``ts_us``."""
        addresses = await self._addresses(ts_us)
        answers = await self.fetcher.get_all(addresses, STATS_PATH)
        if not self.ci.lookupds:
            await self._ask_names(addresses, answers)
        rows = PollRows(ts_us, self._layout)
        for address, answer in zip(addresses, answers):
            self._record(rows, self._names.get(address, (address, 0))[0], answer)
        if rows.missing:
            self._relist = True
        if addresses and len(rows.missing) == len(addresses):
            self.complaints.failed("any nsqd", f"no nsqd answered; recording {len(addresses)} node(s) as missing")
        elif addresses:
            self.complaints.answered("any nsqd")
        table = rows.table()
        if table.num_rows:
            self.writer.append(ts_us, table)

    def _record(self, rows: PollRows, node: str, answer: bytes | Exception) -> None:
        """A node's rows, or its missing row if it did not answer nsqd's /stats."""
        try:
            if isinstance(answer, Exception):
                raise answer
            rows.add_answer(node, answer)
        except FetchError as exc:
            self.complaints.failed(node, f"{node}: {exc}")
            rows.add_missing(node)
        except ValueError as exc:  # msgspec.DecodeError is one
            self.complaints.failed(node, f"{node}: its answer is not nsqd's: {exc}")
            rows.add_missing(node)
        else:
            self.complaints.answered(node)

    async def _addresses(self, ts_us: int) -> list[str]:
        """The HTTP addresses to ask: the lookupds' producers, or --nsqd-http-address."""
        if not self.ci.lookupds:
            return self.ci.nsqds
        if not self._relist and 0 <= ts_us - self._listed_at < LISTING_SECONDS * 1_000_000:
            return self._listed
        try:
            found = await self.ci.lookupd_producers()
        except UpstreamFailure as exc:
            self.complaints.failed("nsqlookupd", f"nsqlookupd: {exc} (asking the {len(self._listed)} node(s) "
                                                 "listed before)")
            return self._listed
        if found.errors:
            self.complaints.failed("nsqlookupd", "nsqlookupd: " + "; ".join(found.errors))
        else:
            self.complaints.answered("nsqlookupd")
        listed = list(dict.fromkeys(nodes.http_address(producer) for producer in found.value))
        self._relist = bool(found.errors) or listed != self._listed
        self._listed, self._listed_at = listed, ts_us
        return listed

    async def _ask_names(self, addresses: list[str], answers: list[bytes | Exception]) -> None:
        """Name each --nsqd-http-address that answered on a new connection by its /info (a restarted
        nsqd may have a new name); one whose /info fails has that failure as its answer."""
        new = [n for n, address in enumerate(addresses) if not isinstance(answers[n], Exception)
               and self._names.get(address, (address, -1))[1] != self.fetcher.connects.get(address)]
        infos = await self.fetcher.get_all([addresses[n] for n in new], "/info")
        for n, info in zip(new, infos):
            address = addresses[n]
            try:
                if isinstance(info, FetchError):
                    raise info
                name = nodes.http_address(nodes.nsqd_producer(json.loads(info), address, []))
            except (FetchError, ValueError) as exc:
                answers[n] = exc
                continue
            self._names[address] = (name, self.fetcher.connects[address])
