"""The history section of a page: the range an operator picked, its charts, or why there are none.

A range is shown in the windows that suit it: the last hour in 1-minute windows, a day or a
week in 1-hour windows. The charts span the whole range, ending at the current window, so an
empty stretch reads as "no data then", not as a squeezed axis.
"""

import math
from dataclasses import dataclass, field

from markupsafe import Markup

from .charts import line_chart
from .windows import WINDOWS

RANGES = {"1h": (3600, "1m"), "24h": (86400, "1h"), "7d": (7 * 86400, "1h")}
DEFAULT_RANGE = "1h"
STATUS_ORDER = ("NO_CONSUMERS", "STALLED", "LAGGING", "OK", "IDLE")


@dataclass
class Panel:
    range: str
    charts: list[Markup] = field(default_factory=list)
    note: str = ""
    ranges: tuple[str, ...] = tuple(RANGES)


def chosen_range(value: str | None) -> str:
    return value if value in RANGES else DEFAULT_RANGE


def since_for(range_name: str, now: float) -> float:
    """Unix seconds of the first window start a range shows."""
    span, window = RANGES[range_name]
    return _end(now, window) - span


def _end(now: float, window: str) -> int:
    size = WINDOWS[window]
    return math.ceil(now / size) * size


def panel(rows: list[dict], range_name: str, now: float, empty_note: str,
          charts: tuple[tuple[str, str, str, str], ...]) -> Panel:
    """The charts of ``rows`` (windows as /api/rollups shows them), one per entry of ``charts``."""
    if not rows:
        return Panel(range_name, note=empty_note)
    span, window = RANGES[range_name]
    end = _end(now, window)
    drawn = [line_chart([(row["ts"], row[key]) for row in rows], title=title, unit=unit, start=end - span,
                        end=end, window_seconds=WINDOWS[window], detail=detail)
             for key, title, unit, detail in charts]
    return Panel(range_name, drawn)


# (column, title, unit, detail) of each chart
QUEUE_CHARTS = (("rate", "Message rate", "msg/s", ""), ("depth_max", "Depth", "messages", "highest in each window"),
                ("in_flight_max", "In flight", "messages", "highest in each window"))
COUNTER_CHARTS = (("rate", "Messages processed by every channel", "msg/s", ""),)


def worst_first(entries: list[dict]) -> list[dict]:
    """Health entries ordered by how much they need an operator."""
    return sorted(entries, key=lambda entry: (STATUS_ORDER.index(entry["status"])
                                              if entry["status"] in STATUS_ORDER else 0, entry["channel"]))
