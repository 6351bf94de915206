"""Server-drawn SVG charts and the pages' history panels: axes, units, the newest value, gaps, escaping."""

import re
import xml.etree.ElementTree as ET

import pytest

from nsqadmin.history import panels
from nsqadmin.history.charts import line_chart, short_number, value_ticks

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_795_075_200  # 2026-11-19 08:00:00 UTC


@pytest.mark.parametrize("value, text", [(0, "0"), (7, "7"), (0.25, "0.25"), (12.5, "12.5"), (950, "950"),
                                         (1200, "1.2k"), (1000, "1k"), (3_400_000, "3.4M"), (2e9, "2G")])
def test_short_numbers(value, text):
    assert short_number(value) == text


@pytest.mark.parametrize("highest, ticks", [(0, [0, 1]), (3, [0, 1, 2, 3, 4]), (59, [0, 20, 40, 60, 80]),
                                            (177, [0, 50, 100, 150, 200]), (0.3, [0, 0.1, 0.2, 0.3, 0.4]),
                                            (100, [0, 50, 100, 150]), (12_000, [0, 5000, 10000, 15000])])
def test_value_axes_are_round_and_leave_headroom(highest, ticks):
    assert value_ticks(highest) == pytest.approx(ticks)


def chart(points, **options):
    svg = line_chart(points, title=options.get("title", "Message rate"), unit="msg/s", start=T0,
                     end=options.get("end", T0 + 3600), window_seconds=60)
    return str(svg), ET.fromstring(str(svg))


def texts(tree) -> list[str]:
    return ["".join(node.itertext()) for node in tree.iter(f"{SVG}text")]


def test_a_chart_has_title_unit_axes_and_the_newest_value():
    svg, tree = chart([(T0 + 60 * m, float(m)) for m in range(60)])
    labels = texts(tree)
    assert labels[0] == "Message rate (msg/s)" and "now 59 msg/s" in labels
    assert ["0", "20", "40", "60", "80"] == [t for t in labels if re.fullmatch(r"[\d.k]+", t)]
    assert {"08:00", "08:15", "08:30", "08:45", "09:00", "UTC"} <= set(labels)
    assert len(tree.findall(f"{SVG}polyline")) == 1 and tree.get("role") == "img"


def test_a_missing_window_breaks_the_line_instead_of_dropping_to_zero():
    points = [(T0 + 60 * m, 5.0) for m in range(10)] + [(T0 + 60 * m, 5.0) for m in range(14, 20)]
    _, tree = chart(points)
    lines = tree.findall(f"{SVG}polyline")
    assert [len(line.get("points").split()) for line in lines] == [10, 6]
    assert all(float(p.split(",")[1]) < 150 for line in lines for p in line.get("points").split())


def test_a_lone_window_is_a_dot_and_no_data_says_so():
    _, tree = chart([(T0, 3.0)])
    assert len(tree.findall(f"{SVG}circle")) == 1
    _, empty = chart([])
    assert "no data" in texts(empty)


def test_titles_are_escaped():
    svg, tree = chart([(T0, 1.0)], title='<script>alert("x")</script> & co')
    assert "<script>" not in svg and texts(tree)[0].startswith('<script>alert("x")</script> & co')


def test_day_and_week_ranges_label_hours_and_dates():
    _, day = chart([(T0, 1.0)], end=T0 + 86400)
    assert "12:00" in texts(day)
    _, week = chart([(T0, 1.0)], end=T0 + 7 * 86400)
    assert "Nov 20" in texts(week)


def test_a_panel_spans_the_range_ending_at_the_current_window():
    rows = [{"ts": T0 + 60 * m, "rate": 1.0, "depth_max": 2, "in_flight_max": 0} for m in range(5)]
    panel = panels.panel(rows, "1h", T0 + 299.5, "nothing yet", panels.QUEUE_CHARTS)
    assert panel.note == "" and len(panel.charts) == 3
    assert {"07:15", "08:00"} <= set(texts(ET.fromstring(str(panel.charts[0]))))  # the hour up to 08:05
    empty = panels.panel([], "24h", T0, "nothing yet", panels.QUEUE_CHARTS)
    assert empty.charts == [] and empty.note == "nothing yet"
    assert panels.chosen_range("7d") == "7d" and panels.chosen_range("1y") == panels.chosen_range(None) == "1h"
