"""Which minutes a rollup run rewrites, and which raw files it reads to do it.

Theory of operation. A counter's delta needs the series' previous snapshot, at most
:data:`MAX_DELTA_GAP` earlier (further back, the snapshot is a new baseline). So new rows in
the minutes ``[a, b)`` change the windows of ``[a, b + MAX_DELTA_GAP)``: their own, and those
of the next snapshots of their series when a late file lands among rows already rolled up.
Every minute of those spans is rewritten whole, from the raw rows of
``[a - MAX_DELTA_GAP, b + MAX_DELTA_GAP)`` in the hour directories they overlap: its windows
become what the raw files say, none if it has no rows, so a run gives the windows a run over
every raw file would.

The minutes with new rows come from the Parquet footers' ``ts`` statistics of the new files
(a file per poll or per flush spans a few minutes). An hour directory holding no file rolled up
before counts as new from start to end without opening a footer: rewriting minutes that have no
rows costs nothing, and a first run over a full day reads no footer.
"""

from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq

from .rollup_state import raw_hour

MAX_DELTA_GAP = timedelta(minutes=15)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)

Span = tuple[datetime, datetime]  # [start, end)


def merged(spans: list[Span]) -> list[Span]:
    """The same instants as ``spans``, as few spans as possible, in order."""
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _floor_minute(ts: datetime) -> datetime:
    return ts.replace(second=0, microsecond=0)


def _from_micros(value: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=value)


def file_minutes(raw_dir: Path, relative: str) -> Span:
    """The minutes a raw file's rows fall in, from its footer; its whole hour without statistics."""
    metadata = pq.read_metadata(raw_dir / relative)
    column = metadata.schema.names.index("ts")
    stats = [metadata.row_group(i).column(column).statistics for i in range(metadata.num_row_groups)]
    if not stats or not all(s is not None and s.has_min_max for s in stats):
        hour = raw_hour(relative)
        return hour, hour + HOUR
    first = _from_micros(min(s.min_raw for s in stats))
    last = _from_micros(max(s.max_raw for s in stats))
    return _floor_minute(first), _floor_minute(last) + MINUTE


def new_row_spans(raw_dir: Path, new_files: list[str], seen: set[str]) -> list[Span]:
    """The minutes holding rows of ``new_files`` (paths relative to ``raw_dir``), merged."""
    hours_with_seen_files = {relative.rpartition("/")[0] for relative in seen}
    spans = []
    for relative in new_files:
        directory = relative.rpartition("/")[0]
        if directory in hours_with_seen_files:
            spans.append(file_minutes(raw_dir, relative))
        else:
            hour = raw_hour(directory)
            spans.append((hour, hour + HOUR))
    return merged(spans)


def rewrite_spans(new_rows: list[Span]) -> list[Span]:
    """The minutes whose windows the run rewrites."""
    return merged([(start, end + MAX_DELTA_GAP) for start, end in new_rows])


def read_spans(rewrite: list[Span]) -> list[Span]:
    """The raw rows the rewritten minutes need: theirs and the previous snapshots of their series."""
    return merged([(start - MAX_DELTA_GAP, end) for start, end in rewrite])


def overlaps(start: datetime, end: datetime, spans: list[Span]) -> bool:
    return any(start < span_end and span_start < end for span_start, span_end in spans)


def files_to_read(raw_dir: Path, files: list[str], spans: list[Span]) -> list[str]:
    """The raw files (relative paths) with rows in ``spans``: those in hour directories that
    overlap them, less those whose rows all lie outside (from their footers) where an hour
    directory holds several files."""
    in_hours = [relative for relative in files if overlaps(raw_hour(relative), raw_hour(relative) + HOUR, spans)]
    per_hour = Counter(relative.rpartition("/")[0] for relative in in_hours)
    return [relative for relative in in_hours
            if per_hour[relative.rpartition("/")[0]] == 1 or overlaps(*file_minutes(raw_dir, relative), spans)]


def hours_overlapping(spans: list[Span]) -> list[datetime]:
    """The starts of the hours that ``spans`` overlap."""
    hours = set()
    for start, end in spans:
        hour = start.replace(minute=0, second=0, microsecond=0)
        while hour < end:
            hours.add(hour)
            hour += HOUR
    return sorted(hours)
