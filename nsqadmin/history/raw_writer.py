"""The recorder's buffer of raw rows, and its flush into Parquet files under ``<stats-dir>/raw``.

Theory of operation. Each poll's rows arrive as one Arrow table (raw_rows.PollRows), so the
buffer is columnar and compact: no dict per row. ``flush()`` takes the whole buffer and
writes it, in a worker thread so the event loop never waits on the disk, as one file per
UTC hour partition (layout.raw_partition) named ``<YYYYMMDDTHHMMSS of its first ts>-<8 hex
random>.parquet``: written under a hidden name, fsynced, then renamed into place
(layout.publish), so readers only ever see whole files. Flushes run one at a time.

A partition that cannot be written (disk full, permissions) is logged with the reason and
its rows go back to the front of the buffer for the next flush; past KEEP_ROWS buffered
rows the oldest are dropped, with a warning, so a disk that stays full cannot exhaust memory.

A recorder killed mid-flush (kill -9, power loss) leaves its hidden file behind, which no
reader sees and nothing else deletes. So at start the recorder deletes the hidden raw files
(recorders' own names only: the rollup job cleans up its own) not written to for
STALE_SECONDS: a flush writes its file in seconds, so such a file's writer is dead, whether
it was this nsqadmin before a restart or another nsqadmin sharing the stats dir, possibly on
another host (so no lock or pid is trusted: a live writer's file is simply recent). Files
too recent to judge are looked at again after each flush until they are gone or stale.
"""

import asyncio
import logging
import os
import re
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .layout import hidden_twin, publish, raw_dir, raw_partition

log = logging.getLogger("nsqadmin")

KEEP_ROWS = 2_000_000
STALE_SECONDS = 300.0
TEMPORARY_NAME = re.compile(r"\.\d{8}T\d{6}-[0-9a-f]{8}\.parquet\.\d+\.tmp")  # hidden_twin of a raw file

Pending = list[tuple[int, pa.Table]]  # (ts in µs, that poll's rows), oldest first


def utc(ts_us: int) -> datetime:
    return datetime.fromtimestamp(ts_us / 1e6, timezone.utc)


def write_raw_file(directory: Path, polls: Pending) -> Path:
    """One Parquet file of ``polls`` in ``directory``, published whole."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{utc(polls[0][0]):%Y%m%dT%H%M%S}-{secrets.token_hex(4)}.parquet"
    temporary = hidden_twin(final)
    try:
        pq.write_table(pa.concat_tables([table for _, table in polls]), temporary)
        publish(temporary, final)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return final


def write_partitions(stats_dir: Path, polls: Pending) -> Pending:
    """Write ``polls`` as one file per UTC hour; the polls of the partitions that failed."""
    by_partition: dict[Path, Pending] = {}
    for ts_us, table in polls:
        by_partition.setdefault(raw_partition(stats_dir, utc(ts_us)), []).append((ts_us, table))
    failed: Pending = []
    for directory, group in by_partition.items():
        try:
            write_raw_file(directory, group)
        except (OSError, pa.ArrowException) as exc:
            rows = sum(table.num_rows for _, table in group)
            reason = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else exc
            log.error("stats: cannot write %d rows to %s - %s; keeping them for the next flush",
                      rows, directory, reason)
            failed += group
    return failed


def raw_temporaries(stats_dir: Path) -> set[Path]:
    """The hidden files of recorders' flushes under ``<stats-dir>/raw``, finished or not."""
    return {Path(root) / name for root, _, names in os.walk(raw_dir(stats_dir))
            for name in names if TEMPORARY_NAME.fullmatch(name)}


def remove_stale(temporaries: set[Path], now: float) -> set[Path]:
    """Delete those of ``temporaries`` not written to for STALE_SECONDS; those still too recent."""
    recent = set()
    for path in temporaries:
        try:
            if now - path.stat().st_mtime < STALE_SECONDS:
                recent.add(path)
                continue
            path.unlink()
        except FileNotFoundError:  # published, or removed by another nsqadmin
            continue
        except OSError as exc:
            log.warning("stats: cannot remove the stale temporary file %s - %s", path,
                        exc.strerror.lower() if exc.strerror else exc)
            continue
        log.info("stats: removed %s, left by a flush that did not finish", path)
    return recent


class RawWriter:
    """Rows buffered by poll; ``flush()`` writes them all."""

    def __init__(self, stats_dir: str | Path, keep_rows: int = KEEP_ROWS):
        self.stats_dir = Path(stats_dir)
        self.keep_rows = keep_rows
        self.rows = 0
        self._pending: Pending = []
        self._lock = asyncio.Lock()
        self._recent_temporaries: set[Path] = set()  # hidden raw files too recent to judge yet

    async def remove_stale_temporaries(self) -> None:
        """Delete the hidden raw files left by flushes that died (see the module's docstring)."""
        async with self._lock:
            self._recent_temporaries = await asyncio.to_thread(
                lambda: remove_stale(raw_temporaries(self.stats_dir), time.time()))

    @property
    def oldest_ts_us(self) -> int | None:
        """The time of the oldest buffered poll, if any."""
        return self._pending[0][0] if self._pending else None

    def append(self, ts_us: int, table: pa.Table) -> None:
        self._pending.append((ts_us, table))
        self.rows += table.num_rows

    async def flush(self) -> None:
        """Write every buffered row (after any flush already under way)."""
        async with self._lock:
            polls, self._pending, self.rows = self._pending, [], 0
            if self._recent_temporaries:
                self._recent_temporaries = await asyncio.to_thread(remove_stale, self._recent_temporaries,
                                                                   time.time())
            if not polls:
                return
            failed = await asyncio.to_thread(write_partitions, self.stats_dir, polls)
            if failed:
                self._keep(failed)

    def _keep(self, failed: Pending) -> None:
        """Put rows that could not be written back in front, dropping the oldest past ``keep_rows``."""
        self._pending = failed + self._pending
        self.rows = sum(table.num_rows for _, table in self._pending)
        dropped = 0
        while self.rows > self.keep_rows and len(self._pending) > 1:
            _, table = self._pending.pop(0)
            self.rows -= table.num_rows
            dropped += table.num_rows
        if dropped:
            log.warning("stats: %d unwritten rows are more than %d; dropped the oldest %d", self.rows + dropped,
                        self.keep_rows, dropped)
