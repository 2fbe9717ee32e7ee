"""Intervals on medians: what lets a page call one contender faster than another.

A step time is measured in several processes (rounds), several steps each. Steps of one process share
its allocator state, compiled code and clocks, so they are not independent draws; the bootstrap below
resamples processes first, then steps within each resampled process (a two-level bootstrap), and takes
the median of the pooled resample. Two contenders are ranked only when their 95 % intervals are disjoint.
"""
from __future__ import annotations

import random
import statistics

CONFIDENCE = 0.95
RESAMPLES = 4000


def pooled_median(groups: list[list[float]]) -> float:
    return statistics.median([value for group in groups for value in group])


def median_ci(groups: list[list[float]], confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
              seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the pooled median: resample the groups (processes), then the values in each."""
    groups = [list(g) for g in groups if g]
    if not groups:
        raise ValueError("median_ci needs at least one non-empty group")
    rng = random.Random(seed)
    medians = []
    for _ in range(resamples):
        picked = [groups[rng.randrange(len(groups))] for _ in groups]
        medians.append(statistics.median([g[rng.randrange(len(g))] for g in picked for _ in g]))
    medians.sort()
    tail = (1 - confidence) / 2
    lower = medians[int(tail * (resamples - 1))]
    upper = medians[int(round((1 - tail) * (resamples - 1)))]
    return lower, upper


def disjoint(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Two intervals that do not overlap: only then may one median be called smaller."""
    return a[1] < b[0] or b[1] < a[0]
