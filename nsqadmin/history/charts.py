"""Line charts as inline SVG, drawn on the server: readable without JavaScript or hovering.

Each chart states what it plots and its unit, has labelled axes (UTC times along the bottom,
rounded values up the side) and prints the newest value in its corner. A window with no
data leaves a gap in the line rather than a fall to zero: a node that did not answer is not
a node with nothing queued. Every text drawn comes from the cluster (topic names) or the
caller, so all of it is escaped.
"""

import math
from datetime import datetime, timezone

from markupsafe import Markup, escape

WIDTH, HEIGHT = 480, 200
LEFT, RIGHT, TOP, BOTTOM = 48, 24, 48, 26  # RIGHT: room for half a date label under the last tick
# (longest span shown, tick spacing in seconds, strftime of a tick label)
_TIME_TICKS = ((3 * 3600, 900, "%H:%M"), (6 * 3600, 3600, "%H:%M"), (2 * 86400, 4 * 3600, "%H:%M"),
               (10 * 86400, 86400, "%b %d"), (math.inf, 7 * 86400, "%b %d"))


def short_number(value: float) -> str:
    """``950`` -> ``950``, ``12.5`` -> ``12.5``, ``1200`` -> ``1.2k``, ``3400000`` -> ``3.4M``."""
    size = abs(value)
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if size >= scale:
            return f"{value / scale:.1f}".rstrip("0").rstrip(".") + suffix
    if size == 0 or size >= 100 or float(value).is_integer():
        return f"{value:.0f}"
    return f"{value:.2f}".rstrip("0").rstrip(".") if size < 10 else f"{value:.1f}"


def nice_step(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is at least ``value``."""
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5):
        if step * power >= value * (1 - 1e-9):
            return step * power
    return 10 * power


def value_ticks(highest: float) -> list[float]:
    """Round values from 0 to a little above ``highest``, at most six of them (0 and 1 for nothing)."""
    if highest <= 0:
        return [0.0, 1.0]
    step = nice_step(highest * 1.05 / 4)
    return [step * i for i in range(math.ceil(highest * 1.05 / step) + 1)]


def _segments(points: list[tuple[int, float | None]], window_seconds: int) -> list[list[tuple[int, float]]]:
    """Runs of consecutive windows with values; a missing window starts a new run."""
    runs: list[list[tuple[int, float]]] = []
    previous = None
    for ts, value in points:
        if value is None:
            previous = None
            continue
        if previous is None or ts - previous > 1.5 * window_seconds:
            runs.append([])
        runs[-1].append((ts, value))
        previous = ts
    return runs


def _time_ticks(start: int, end: int) -> tuple[list[int], str]:
    span = end - start
    for longest, step, label in _TIME_TICKS:
        if span <= longest:
            first = -(-start // step) * step
            return list(range(first, end + 1, step)), label
    raise AssertionError("the last tick rule takes any span")


def line_chart(points: list[tuple[int, float | None]], *, title: str, unit: str, start: int, end: int,
               window_seconds: int, detail: str = "") -> Markup:
    """An SVG chart of ``points`` (window start in unix seconds, value) between ``start`` and ``end``;
    ``detail`` says more about the values than their unit ("highest in each window")."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ticks_y = value_ticks(max((v for _, v in points if v is not None), default=0))
    top_value = ticks_y[-1]
    span = max(end - start, 1)

    def x(ts: int) -> float:
        return LEFT + plot_w * (ts - start) / span

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top_value)

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{escape(title)} ({escape(unit)})" xmlns="http://www.w3.org/2000/svg">',
             f'<text class="chart-title" x="{LEFT}" y="18">{escape(title)} <tspan class="chart-unit">'
             f'({escape(unit)}{escape(", " + detail) if detail else ""})</tspan></text>']
    latest = next((v for _, v in reversed(points) if v is not None), None)
    now_text = f"now {short_number(latest)} {unit}" if latest is not None else "no data"
    parts.append(f'<text class="chart-now" x="{LEFT}" y="36">{escape(now_text)}</text>')
    for value in ticks_y:
        parts.append(f'<line class="chart-grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value):.1f}" y2="{y(value):.1f}"/>'
                     f'<text class="chart-axis" x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">'
                     f'{short_number(value)}</text>')
    ticks, label = _time_ticks(start, end)
    for ts in ticks:
        text = datetime.fromtimestamp(ts, timezone.utc).strftime(label)
        parts.append(f'<line class="chart-tick" x1="{x(ts):.1f}" x2="{x(ts):.1f}" y1="{TOP + plot_h}" '
                     f'y2="{TOP + plot_h + 4}"/><text class="chart-axis" x="{x(ts):.1f}" y="{HEIGHT - 6}" '
                     f'text-anchor="middle">{text}</text>')
    # in the header's corner: beside the time labels it collides with a tick at the right edge
    parts.append(f'<text class="chart-axis chart-utc" x="{WIDTH - RIGHT}" y="18" text-anchor="end">UTC</text>')
    baseline = y(0)
    for run in _segments(points, window_seconds):
        line = " ".join(f"{x(ts):.1f},{y(v):.1f}" for ts, v in run)
        if len(run) == 1:
            parts.append(f'<circle class="chart-dot" cx="{x(run[0][0]):.1f}" cy="{y(run[0][1]):.1f}" r="2.5"/>')
            continue
        area = f"{x(run[0][0]):.1f},{baseline:.1f} {line} {x(run[-1][0]):.1f},{baseline:.1f}"
        parts.append(f'<polygon class="chart-area" points="{area}"/><polyline class="chart-line" points="{line}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))
