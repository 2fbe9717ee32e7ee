"""The interval rule of the step figures: a two-level bootstrap of the median, and disjointness."""
import random
import statistics

import pytest

from bench.harness.stats import disjoint, median_ci, pooled_median


def test_interval_holds_the_median_and_narrows_with_more_data():
    rng = random.Random(1)
    few = [[100 + rng.gauss(0, 2) for _ in range(5)] for _ in range(2)]
    many = [[100 + rng.gauss(0, 2) for _ in range(20)] for _ in range(6)]
    for groups in (few, many):
        lo, hi = median_ci(groups)
        assert lo <= pooled_median(groups) <= hi
    assert (lambda c: c[1] - c[0])(median_ci(many)) < (lambda c: c[1] - c[0])(median_ci(few))


def test_a_shift_between_processes_widens_the_interval():
    """Steps within a process agree, processes do not: resampling the steps alone would hide that."""
    rng = random.Random(2)
    groups = [[offset + rng.gauss(0, 0.1) for _ in range(10)] for offset in (100, 104, 108)]
    lo, hi = median_ci(groups)
    assert hi - lo > 3  # a step-only bootstrap gives about 0.1 here


def test_coverage_of_a_known_median():
    """About 95 % of intervals from fresh samples hold the true median (0): loose bounds, 200 draws."""
    rng = random.Random(3)
    hits = 0
    for trial in range(200):
        groups = [[rng.gauss(0, 1) for _ in range(10)] for _ in range(3)]
        lo, hi = median_ci(groups, resamples=400, seed=trial)
        hits += lo <= 0 <= hi
    assert 0.85 <= hits / 200 <= 1.0


def test_disjoint_and_bad_input():
    assert disjoint((1, 2), (2.5, 3)) and disjoint((2.5, 3), (1, 2))
    assert not disjoint((1, 2), (2, 3)) and not disjoint((1, 3), (2, 2.5))
    with pytest.raises(ValueError):
        median_ci([[], []])
    assert statistics.median([1, 2, 3]) == pooled_median([[1], [2, 3]])
