"""A query's expected traffic by time of day, learned from weeks of window counts
(pure: no Spark, no I/O; ``job.py`` runs it per query on the executors).

The period (a day) is cut into equal slots. A slot's expectation is the mean count
per one-second bucket over every bucket of the training range that falls in it,
buckets without any record counting as 0. Anomalies in the training data (a spike,
a language gone silent) would bend that mean, so it is made robust: buckets that a
Poisson with the slot's median could hardly produce are left out, and the mean is
taken over the rest. The detector interpolates between slot middles
(``services.dip_detector.model.interpolate``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

BUCKET_MS = 1000
OUTLIER_SIGMAS = 4.0  # a bucket this many Poisson deviations from the median is left out


def slot_of(bucket: int, period_ms: int, slots: int) -> int:
    return (bucket % period_ms) * slots // period_ms


def fit_profile(
    counts: Iterable[tuple[int, int]], start_ms: int, end_ms: int, period_ms: int, slots: int
) -> list[float]:
    """Expected count per bucket for each of ``slots`` slots of ``period_ms``, from
    ``counts`` ((bucket start, count)) of one query over the buckets in
    ``[start_ms, end_ms)``."""
    if period_ms % slots or (period_ms // slots) % BUCKET_MS:
        raise ValueError(f"a period of {period_ms} ms does not cut into {slots} whole-second slots")
    first = -(-start_ms // BUCKET_MS) * BUCKET_MS
    n = max(0, (end_ms - first) // BUCKET_MS)
    series = np.zeros(n, dtype=np.float64)
    for bucket, count in counts:
        i = (bucket - first) // BUCKET_MS
        if 0 <= i < n:
            series[i] += count
    buckets = first + np.arange(n, dtype=np.int64) * BUCKET_MS
    slot = (buckets % period_ms) * slots // period_ms
    order = np.argsort(slot, kind="stable")  # the buckets grouped by slot: O(n log n)
    bounds = np.searchsorted(slot[order], np.arange(slots + 1))
    profile = []
    for j in range(slots):
        sample = series[order[bounds[j] : bounds[j + 1]]]
        profile.append(robust_mean(sample) if sample.size else 0.0)
    return profile


def robust_mean(sample: np.ndarray) -> float:
    """The mean of ``sample`` without the buckets far from its median (in Poisson
    deviations of the median; at least one count either way)."""
    median = float(np.median(sample))
    spread = OUTLIER_SIGMAS * math.sqrt(max(median, 1.0))
    kept = sample[np.abs(sample - median) <= max(spread, 1.0)]
    return round(float(kept.mean() if kept.size else median), 4)
