"""The rollup job's bookkeeping under rollups/: one run at a time, the raw files already rolled up,
and retention.

Theory of operation. ``_state.json`` lists the raw files (paths relative to raw/) whose rows are
in the rollups (``seen``). A run rolls up the visible raw files not in that list and saves the
list with them only after every rollup file is published: a run that dies earlier leaves them
new, and the next run recomputes the same minutes from scratch, so nothing is counted twice
and nothing is lost. ``compacting`` records a compaction of raw files in progress (compaction.py).
``stale_hours`` are the hours whose 1h and 1d windows wait for a later run (rollup_job.py).
Retention deletes whole periods: raw hour directories and rollup partitions whose period ended
before ``now - retention``.
"""

import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Iterator

from . import layout
from .partitions import period_end, period_start


class StatsDirError(Exception):
    """The stats directory cannot be used; the message says which file and why."""


@dataclass
class RollupState:
    seen: set[str] = field(default_factory=set)
    compacting: dict | None = None
    # The hours whose 1m windows were rewritten since their 1h and 1d windows were last written,
    # and since when there have been such hours.
    stale_hours: set[datetime] = field(default_factory=set)
    stale_since: datetime | None = None

    def mark_stale(self, hours: list[datetime], now: datetime) -> None:
        if not self.stale_hours:
            self.stale_since = now
        self.stale_hours.update(hours)

    def coarser_due(self, now: datetime, every: timedelta) -> bool:
        """Whether the stale hours' 1h and 1d windows are to be written now: one of the hours
        has closed, or they have waited ``every``."""
        return bool(self.stale_hours) and (any(hour + timedelta(hours=1) <= now for hour in self.stale_hours)
                                           or now - self.stale_since >= every)

    def coarser_written(self) -> None:
        self.stale_hours, self.stale_since = set(), None


def _state_path(stats_dir: Path) -> Path:
    return layout.rollups_dir(stats_dir) / layout.STATE_FILE


def load_state(stats_dir: Path) -> RollupState:
    path = _state_path(stats_dir)
    try:
        document = json.loads(path.read_text())
        since = document.get("stale_since")
        return RollupState(set(document["seen"]), document["compacting"],
                           {datetime.fromisoformat(hour) for hour in document.get("stale_hours", [])},
                           since and datetime.fromisoformat(since))
    except FileNotFoundError:
        return RollupState()
    except OSError as exc:
        raise StatsDirError(f"cannot read {path}: {exc.strerror}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise StatsDirError(f"{path} is not a rollup state file ({exc!r}): move it away to roll up "
                            f"every raw file again") from exc


def save_state(stats_dir: Path, state: RollupState) -> None:
    layout.write_json(_state_path(stats_dir), {
        "seen": sorted(state.seen), "compacting": state.compacting,
        "stale_hours": [hour.isoformat() for hour in sorted(state.stale_hours)],
        "stale_since": state.stale_since and state.stale_since.isoformat()})


@contextmanager
def rollup_lock(stats_dir: Path) -> Iterator[bool]:
    """Hold rollups/.lock for the block: True, or False at once if another run holds it."""
    path = layout.rollups_dir(stats_dir) / layout.LOCK_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StatsDirError(f"cannot open {path}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(descriptor)


def raw_files(stats_dir: Path) -> list[str]:
    """Every visible raw file, as a path relative to raw/ (the form ``seen`` holds)."""
    raw = layout.raw_dir(stats_dir)
    return [path.relative_to(raw).as_posix() for path in layout.visible_files(raw)]


def raw_hour(relative: str) -> datetime:
    """The start of the hour a raw file holds, from its directory."""
    return period_start("raw", PurePosixPath(relative))


def delete_expired_raw(stats_dir: Path, state: RollupState, cutoff: datetime) -> int:
    """Delete the raw hour directories that ended before ``cutoff`` and forget their files;
    the number of directories deleted."""
    raw = layout.raw_dir(stats_dir)
    deleted = 0
    for date_dir in sorted(raw.glob("date=*")):
        for hour_dir in sorted(date_dir.glob("hour=*")):
            relative = hour_dir.relative_to(raw).as_posix()
            if _ended_before("raw", PurePosixPath(relative), cutoff):
                shutil.rmtree(hour_dir)
                state.seen = {name for name in state.seen if not name.startswith(relative + "/")}
                deleted += 1
        _remove_if_empty(date_dir)
    return deleted


def delete_expired_rollups(stats_dir: Path, cutoff: datetime) -> int:
    """Delete the rollup partitions whose period ended before ``cutoff``; how many."""
    deleted = 0
    for window in layout.WINDOWS:
        base = layout.rollups_dir(stats_dir) / window
        for path in layout.visible_files(base):
            if _ended_before(window, path.relative_to(base), cutoff):
                path.unlink()
                for directory in path.relative_to(base).parents[:-1]:
                    _remove_if_empty(base / directory)
                deleted += 1
    return deleted


def _ended_before(level: str, path: PurePosixPath, cutoff: datetime) -> bool:
    """Whether the period of ``path`` ended before ``cutoff`` (never for a path that is not
    layout.py's: retention deletes only what the recorder and the job wrote)."""
    try:
        return period_end(level, period_start(level, path)) < cutoff
    except ValueError:
        return False


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass
