"""The period of time each directory of layout.py's tree holds, read back from its ``key=value`` names."""

from datetime import datetime, timedelta, timezone
from pathlib import PurePath

_SPAN = {"raw": timedelta(hours=1), "1m": timedelta(hours=1), "1h": timedelta(days=1)}
_NAMES = {"raw": ("date", "hour", "%Y-%m-%d %H"), "1m": ("date", "hour", "%Y-%m-%d %H"),
          "1h": ("date", "%Y-%m-%d"), "1d": ("month", "%Y-%m")}


def period_start(level: str, path: PurePath) -> datetime:
    """The start of the period of a raw file or directory (``level`` "raw") or a rollup
    partition (``level`` "1m", "1h" or "1d"), from the ``date=``, ``hour=`` and ``month=``
    parts of its path; ValueError for a path outside layout.py's tree."""
    *names, pattern = _NAMES[level]
    keys = dict(part.split("=", 1) for part in path.parts if "=" in part)
    try:
        start = datetime.strptime(" ".join(keys[name] for name in names), pattern)
    except (KeyError, ValueError):
        wanted = "/".join(f"{name}=" + {"date": "YYYY-MM-DD", "hour": "HH", "month": "YYYY-MM"}[name]
                          for name in names)
        raise ValueError(f"{path} is not in a {wanted} directory") from None
    return start.replace(tzinfo=timezone.utc)


def period_end(level: str, start: datetime) -> datetime:
    if level in _SPAN:
        return start + _SPAN[level]
    return (start + timedelta(days=32)).replace(day=1)
