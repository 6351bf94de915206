"""Numbers as operators read them: thousands separators, human durations, percentile labels.

Jinja2 filters for nsqadmin's pages (NSQ's handlebars helpers commafy, nanotohuman,
floatToPercent and percSuffix, in the same spirit).
"""

from datetime import datetime, timezone
from urllib.parse import quote

_NS_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs"))
_SPANS = ((86400, "d"), (3600, "h"), (60, "m"), (1, "s"))


def commafy(value) -> str:
    """``1234567`` -> ``1,234,567``."""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def human_size(size) -> str:
    """A byte count: ``512 B``, ``1.5 KiB``, ``12.3 MiB``."""
    size = float(size)
    if size < 1024:
        return f"{int(size)} B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024:
            return f"{size:.1f} {unit}"
    return f"{size / 1024:.1f} TiB"


def nanotohuman(ns) -> str:
    """A latency in nanoseconds: ``850.0µs``, ``1.2ms``, ``3.45s``, ``2m5s``."""
    ns = float(ns)
    if ns >= 60 * 1_000_000_000:
        return human_duration(ns / 1_000_000_000)
    for scale, unit in _NS_UNITS:
        if ns >= scale:
            value = ns / scale
            return f"{value:.2f}{unit}" if value < 10 else f"{value:.1f}{unit}"
    return f"{int(ns)}ns"


def human_duration(seconds) -> str:
    """A span in its two largest units: ``3d4h``, ``5h12m``, ``4m3s``, ``12s``."""
    seconds = max(0, int(seconds))
    if seconds == 0:
        return "0s"
    parts = []
    for size, unit in _SPANS:
        if seconds >= size or parts:
            amount, seconds = divmod(seconds, size)
            parts.append(f"{amount}{unit}")
        if len(parts) == 2:
            break
    if len(parts) == 2 and parts[1].startswith("0"):
        parts.pop()
    return "".join(parts)


def human_millis(ms) -> str:
    """A setting in milliseconds: ``250ms``, or a span as human_duration writes it."""
    return f"{int(ms)}ms" if ms < 1000 else human_duration(ms / 1000)


def percentile_label(quantile) -> str:
    """``0.99`` -> ``p99``, ``0.999`` -> ``p99.9``, ``1.0`` -> ``max``."""
    quantile = float(quantile)
    if quantile >= 1:
        return "max"
    label = f"{quantile * 100:.4f}".rstrip("0").rstrip(".")
    return f"p{label}"


def per_second(rate) -> str:
    """A rate: ``0/s``, ``0.25/s``, ``12.5/s``, ``1,234/s``."""
    rate = float(rate)
    if rate >= 100 or rate == 0:
        return f"{rate:,.0f}/s"
    return f"{rate:.2f}".rstrip("0").rstrip(".") + "/s"


def utc_time(unix_seconds) -> str:
    """``2026-11-23 15:04 UTC``."""
    return datetime.fromtimestamp(int(unix_seconds), timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def path_segment(value: str) -> str:
    """A topic, channel or node name as one URL path segment (``#`` and ``/`` escaped)."""
    return quote(value, safe="")


FILTERS = {
    "commafy": commafy,
    "nanotohuman": nanotohuman,
    "human_duration": human_duration,
    "human_millis": human_millis,
    "human_size": human_size,
    "percentile_label": percentile_label,
    "per_second": per_second,
    "utc_time": utc_time,
    "segment": path_segment,
}
