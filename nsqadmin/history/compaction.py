"""Merging small raw files, with pyarrow (no Spark): a closed block's into one, a closed hour's into one.

Theory of operation. The recorder writes a small file every poll or every 10 s (360 an hour).
Each run first merges the files of every closed ten-minute block (:data:`BLOCK`, ended more than
:data:`BLOCK_CLOSED_AFTER` ago): the files whose rows all lie in one block, rolled up or not
(a merge never mixes the two: the merged file is rolled up if and only if its files were), so a
run reads a handful of files whether it rolls up a minute or a day the recorder wrote while no
run ran. A file arriving late in a merged block is merged with it at the next run. Once an hour
is closed (it ended more than :data:`CLOSED_AFTER` ago) and every file in it has been rolled up,
its files are rewritten as one, so later runs open one file instead of six. The file holds a row group
per five minutes, each sorted by series and time: a run's look-back into the minutes before new
snapshots reads only the row groups whose ``ts`` statistics overlap it, and the job's sort of a
full day by series and time finds the rows of each series in runs. No crash
may let a row be read twice or be lost, so the merge goes in steps, each safe to stop after:

1. write the merged rows under ``file``'s hidden twin (invisible to readers and to the job);
2. record ``{"dir", "file", "replaces"}`` as the state's ``compacting``;
3. publish the twin as ``file``: from here on the merged file holds the hour's rows;
4. delete the replaced files;
5. in ``seen``, put ``file`` in place of the replaced names (or, for files not rolled up yet,
   just drop them: ``file`` is new to the job as they were), and clear ``compacting``.

Every run starts with :func:`recover`, under the job's lock: with ``compacting`` set, it
finishes steps 4-5 if ``file`` is visible, and otherwise rolls back, keeping the old files;
either way every hidden twin of a merged file left is deleted, as only a run that died leaves
one. Step 1 is the costly one (reading, sorting and writing an hour), and it needs no record,
so a first run over a day of recorder files merges two hours at a time in threads (pyarrow
works without the GIL) while the hours before them go through steps 2-5 one by one.
"""

import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import layout
from .rollup_state import RollupState, raw_hour, save_state

CLOSED_AFTER = timedelta(minutes=10)
BLOCK = timedelta(minutes=10)
BLOCK_CLOSED_AFTER = timedelta(minutes=1)
SERIES_ORDER = [("node", "ascending"), ("topic", "ascending"), ("channel", "ascending"), ("ts", "ascending")]
ROW_GROUP_MINUTES = 5
MERGING_THREADS = 2
TWIN_GLOB = "date=*/hour=*/.compacted-*.parquet.*.tmp"


def recover(stats_dir: Path, state: RollupState) -> None:
    """Finish or roll back a compaction that an earlier run did not complete."""
    record = state.compacting
    if record is not None:
        if (layout.raw_dir(stats_dir) / record["dir"] / record["file"]).exists():
            _replace(stats_dir, state, record)
        else:
            state.compacting = None
            save_state(stats_dir, state)
    for twin in layout.raw_dir(stats_dir).glob(TWIN_GLOB):
        twin.unlink()


def compact_closed_blocks(stats_dir: Path, state: RollupState, now: datetime) -> int:
    """Merge the files of each closed block, rolled-up files and new ones apart; how many merges."""
    groups = []
    for directory, names in _open_hours(stats_dir, state, now):
        by_block: dict[tuple[datetime, bool], list[str]] = {}
        for name in names:
            first, last = _file_span(stats_dir, f"{directory}/{name}")
            block = _block(first)
            if first is not None and _block(last) == block and block + BLOCK + BLOCK_CLOSED_AFTER < now:
                by_block.setdefault((block, f"{directory}/{name}" in state.seen), []).append(name)
        groups += [(directory, names, seen) for (_, seen), names in sorted(by_block.items()) if len(names) > 1]
    _merge_all(stats_dir, state, groups)
    return len(groups)


def _open_hours(stats_dir: Path, state: RollupState, now: datetime) -> list[tuple[str, list[str]]]:
    """The raw hour directories of several files that compact_closed_hours does not merge whole
    (still open, or holding files not rolled up), with their files' names."""
    raw = layout.raw_dir(stats_dir)
    out = []
    for hour_dir in sorted(raw.glob("date=*/hour=*")):
        directory = hour_dir.relative_to(raw).as_posix()
        names = [path.name for path in layout.visible_files(hour_dir)]
        whole = _closed(directory, now) and all(f"{directory}/{name}" in state.seen for name in names)
        if len(names) > 1 and not whole:
            out.append((directory, names))
    return out


def _file_span(stats_dir: Path, relative: str) -> tuple[datetime | None, datetime | None]:
    """The first and last ``ts`` of a raw file, from its footer; (None, None) without statistics."""
    metadata = pq.read_metadata(layout.raw_dir(stats_dir) / relative)
    column = metadata.schema.names.index("ts")
    stats = [metadata.row_group(i).column(column).statistics for i in range(metadata.num_row_groups)]
    if not stats or not all(s is not None and s.has_min_max for s in stats):
        return None, None
    return min(s.min for s in stats), max(s.max for s in stats)


def _block(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(minute=ts.minute - ts.minute % (BLOCK // timedelta(minutes=1)), second=0, microsecond=0)


def compact_closed_hours(stats_dir: Path, state: RollupState, now: datetime) -> int:
    """Merge every closed, fully rolled-up raw hour of several files; how many hours were merged."""
    by_dir: dict[str, list[str]] = {}
    for relative in sorted(state.seen):
        directory, _, name = relative.rpartition("/")
        by_dir.setdefault(directory, []).append(name)
    hours = [(directory, names, True) for directory, names in sorted(by_dir.items())
             if _closed(directory, now) and len(names) > 1 and _all_seen(stats_dir, directory, names)]
    _merge_all(stats_dir, state, hours)
    return len(hours)


def _merge_all(stats_dir: Path, state: RollupState, groups: list[tuple[str, list[str], bool]]) -> None:
    """Merge each (directory, names, rolled up) group into one file: steps 1 in threads, 2-5 in turn."""
    with ThreadPoolExecutor(MERGING_THREADS, thread_name_prefix="compaction") as pool:
        merges = [pool.submit(_merge, stats_dir, directory, names, seen) for directory, names, seen in groups]
        try:
            for merge in merges:
                record, twin = merge.result()
                state.compacting = record
                save_state(stats_dir, state)
                layout.publish(twin, layout.raw_dir(stats_dir) / record["dir"] / record["file"])
                _replace(stats_dir, state, record)
        finally:
            for merge in merges:
                merge.cancel()


def _closed(directory: str, now: datetime) -> bool:
    return raw_hour(directory) + timedelta(hours=1) + CLOSED_AFTER < now


def _all_seen(stats_dir: Path, directory: str, names: list[str]) -> bool:
    """Whether the directory's visible files are exactly ``names`` (no file still to roll up)."""
    visible = layout.visible_files(layout.raw_dir(stats_dir) / directory)
    return sorted(path.name for path in visible) == sorted(names)


def _merge(stats_dir: Path, directory: str, names: list[str], seen: bool) -> tuple[dict, Path]:
    """Step 1: files of an hour merged into a hidden twin; the record of steps 2-5 and the twin."""
    record = {"dir": directory, "file": f"compacted-{uuid.uuid4().hex[:16]}.parquet", "replaces": names,
              "seen": seen}
    hour_dir = layout.raw_dir(stats_dir) / directory
    tables = [pq.read_table(hour_dir / name, schema=layout.RAW_SCHEMA) for name in names]
    twin = layout.hidden_twin(hour_dir / record["file"])
    write_compacted(pa.concat_tables(tables), twin)
    return record, twin


def write_compacted(table: pa.Table, path: Path) -> None:
    """``table`` as a compacted hour's file at ``path``: a row group per ROW_GROUP_MINUTES."""
    groups = pc.floor_temporal(table["ts"], ROW_GROUP_MINUTES, "minute")
    with pq.ParquetWriter(path, table.schema, compression="snappy") as writer:
        for start in sorted(pc.unique(groups).to_pylist()):
            writer.write_table(table.filter(pc.equal(groups, start)).sort_by(SERIES_ORDER))


def _replace(stats_dir: Path, state: RollupState, record: dict) -> None:
    """Steps 4-5: the merged file is visible; delete what it replaces and record it as seen."""
    directory = layout.raw_dir(stats_dir) / record["dir"]
    for name in record["replaces"]:
        (directory / name).unlink(missing_ok=True)
        state.seen.discard(f"{record['dir']}/{name}")
    _sync_directory(directory)
    if record.get("seen", True):
        state.seen.add(f"{record['dir']}/{record['file']}")
    state.compacting = None
    save_state(stats_dir, state)


def _sync_directory(directory: Path) -> None:
    """Make the deletions durable before ``seen`` stops naming the files: a replaced file that
    came back after a power loss would be rolled up a second time."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
