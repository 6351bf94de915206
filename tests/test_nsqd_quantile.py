"""The e2e latency quantile stream (nsqd/quantile.py): nearest-rank quantiles within
1/256 of the true sample, bounded memory, and NSQ's two half-window sliding window."""

import math
import random

import pytest

from nsqd.quantile import Quantile, bucket_value, merged_result

T0 = 1_700_000_000 * 10**9
HALF = 5 * 10**9
PERCENTILES = [1.0, 0.99, 0.95, 0.5, 0.01]


def stream(percentiles=PERCENTILES) -> Quantile:
    return Quantile(2 * HALF, percentiles, T0)


def result(q: Quantile, now: int):
    return merged_result([q], now)


def fill(q: Quantile, latencies, now: int = T0 + 1) -> None:
    for latency in latencies:
        q.insert(now - latency, now)


def nearest_rank(samples: list[int], quantile: float) -> int:
    """The ceil(q * n)-th smallest sample: perks' exact answer."""
    return sorted(samples)[max(1, math.ceil(len(samples) * quantile)) - 1]


def assert_within_bound(estimate: int, exact: int) -> None:
    assert abs(estimate - exact) <= exact / 256, (estimate, exact)


def test_empty_stream_answers_zero_for_every_quantile():
    empty = result(stream(), T0)
    assert (empty.count, empty.percentiles) == (0, [(q, 0) for q in PERCENTILES])


def test_values_under_256ns_are_exact_nearest_rank():
    q = stream()
    fill(q, range(1, 101))
    assert result(q, T0 + 1).percentiles == [(1.0, 100), (0.99, 99), (0.95, 95), (0.5, 50), (0.01, 1)]
    q = stream([0.5, 0.95])
    fill(q, range(1, 11))
    assert result(q, T0 + 1).percentiles == [(0.5, 5), (0.95, 10)]  # ceil(9.5) = 10th


@pytest.mark.parametrize("seed, sigma", [(1, 0.3), (2, 1.5), (3, 3.0)])
def test_every_quantile_is_within_1_256_of_the_exact_sample(seed, sigma):
    rng = random.Random(seed)
    samples = [int(rng.lognormvariate(17, sigma)) for _ in range(20_000)]
    q = stream([1.0, 0.999, 0.99, 0.9, 0.75, 0.5, 0.25, 0.1, 0.001])
    fill(q, samples)
    answer = result(q, T0 + 1)
    assert answer.count == len(samples)
    for quantile, value in answer.percentiles:
        assert_within_bound(value, nearest_rank(samples, quantile))


def test_single_samples_over_the_whole_range_are_within_the_bound():
    rng = random.Random(4)
    values = list(range(0, 5000)) + [rng.randrange(1 << bits) for bits in range(13, 63) for _ in range(20)]
    for value in values:
        q = stream([1.0])
        fill(q, [value])
        assert_within_bound(result(q, T0 + 1).percentiles[0][1], value)


def test_bucket_midpoints_grow_with_the_key():
    midpoints = [bucket_value(key) for key in range(0, 7000)]
    assert midpoints == sorted(midpoints) and len(set(midpoints)) == len(midpoints)


def test_memory_is_bounded_by_buckets_not_samples():
    q = stream()
    rng = random.Random(5)
    fill(q, (rng.randrange(1 << 20, 1 << 21) for _ in range(100_000)))  # one power of two: 1.05 ms .. 2.1 ms
    previous, current = q.parts(T0 + 1)
    assert len(previous) == 0 and len(current) <= 128
    assert sum(current.values()) == 100_000


def test_negative_latency_counts_as_zero():
    q = stream([1.0])
    q.insert(T0 + 5_000, T0 + 1)  # published "after" the FIN: the clock stepped back
    assert result(q, T0 + 1).percentiles == [(1.0, 0)]


# -- the sliding window ----------------------------------------------------------------------


def count_at(q: Quantile, now: int) -> int:
    return result(q, now).count


def test_a_sample_lives_between_half_a_window_and_a_window():
    q = stream()
    q.insert(T0, T0 + 1)
    assert count_at(q, T0 + HALF) == 1
    assert count_at(q, T0 + HALF + 1) == 1  # the half it is in became the previous one
    assert count_at(q, T0 + 2 * HALF) == 1
    assert count_at(q, T0 + 2 * HALF + 1) == 0  # and then was dropped


def bucket_value_of(value: int) -> int:
    q = stream([1.0])
    fill(q, [value])
    return result(q, T0 + 1).percentiles[0][1]


def test_samples_of_the_second_half_outlive_those_of_the_first():
    q = stream([1.0])
    q.insert(T0, T0 + 10)  # latency 10 ns, first half
    q.insert(T0 + HALF, T0 + HALF + 1_000)  # latency 1000 ns, second half
    assert result(q, T0 + HALF + 1_000).count == 2
    answer = result(q, T0 + 2 * HALF + 1)
    assert (answer.count, answer.percentiles[0][1]) == (1, bucket_value_of(1_000))


def test_a_long_idle_stream_forgets_everything_and_keeps_its_half_window_grid():
    q = stream()
    fill(q, [100] * 10)
    later = T0 + 1000 * HALF + HALF // 2
    assert count_at(q, later) == 0
    q.insert(later - 50, later)
    assert count_at(q, T0 + 1001 * HALF) == 1
    assert count_at(q, T0 + 1002 * HALF) == 1
    assert count_at(q, T0 + 1002 * HALF + 1) == 0


def test_inserts_after_a_rotation_go_to_the_new_current_half():
    q = stream()
    q.insert(T0, T0 + 1)
    q.insert(T0 + HALF, T0 + HALF + 1)  # rotates first, then counts
    previous, current = q.parts(T0 + HALF + 1)
    assert (sum(previous.values()), sum(current.values())) == (1, 1)


# -- merging (a topic's latency) ---------------------------------------------------------------


def test_merged_result_is_the_quantiles_of_all_samples():
    rng = random.Random(6)
    fast = [rng.randrange(1_000, 2_000_000) for _ in range(3_000)]
    slow = [rng.randrange(50_000_000, 900_000_000) for _ in range(1_000)]
    a, b = stream(), Quantile(2 * HALF, PERCENTILES, T0 + 12345)  # windows need not be aligned
    fill(a, fast)
    fill(b, slow, now=T0 + 20_000)
    merged = merged_result([a, b], T0 + 30_000)
    assert merged.count == 4_000
    for quantile, value in merged.percentiles:
        assert_within_bound(value, nearest_rank(fast + slow, quantile))
    assert result(a, T0 + 30_000).count == 3_000  # merging leaves the channels' streams alone
