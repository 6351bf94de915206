"""The numbers nsqadmin's pages show: separators, latencies, durations, sizes, percentile labels."""

import pytest

from nsqadmin.humanize import commafy, human_duration, human_size, nanotohuman, path_segment, percentile_label


@pytest.mark.parametrize("value, text", [(0, "0"), (999, "999"), (1234567, "1,234,567"), (2500.0, "2,500"),
                                         (1234.567, "1,234.57")])
def test_commafy(value, text):
    assert commafy(value) == text


@pytest.mark.parametrize("ns, text", [(0, "0ns"), (850, "850ns"), (1_500, "1.50µs"), (850_000, "850.0µs"),
                                      (1_234_567, "1.23ms"), (3_450_000_000, "3.45s"), (125 * 10**9, "2m5s")])
def test_nanotohuman(ns, text):
    assert nanotohuman(ns) == text


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (12, "12s"), (60, "1m"), (243, "4m3s"), (3600 * 5 + 12 * 60, "5h12m"),
                                           (86400 * 3 + 3600 * 4 + 59, "3d4h"), (86400 * 2, "2d"), (-5, "0s")])
def test_human_duration(seconds, text):
    assert human_duration(seconds) == text


@pytest.mark.parametrize("size, text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (10 * 1024**2, "10.0 MiB"),
                                        (5 * 1024**3, "5.0 GiB"), (2 * 1024**4, "2.0 TiB")])
def test_human_size(size, text):
    assert human_size(size) == text


@pytest.mark.parametrize("quantile, label", [(0.99, "p99"), (0.999, "p99.9"), (0.5, "p50"), (1.0, "max")])
def test_percentile_label(quantile, label):
    assert percentile_label(quantile) == label


def test_path_segment_escapes_what_a_url_path_cannot_hold():
    assert path_segment("events#ephemeral") == "events%23ephemeral"
    assert path_segment("[::1]:4151") == "%5B%3A%3A1%5D%3A4151"
