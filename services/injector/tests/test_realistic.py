"""The realistic scenario: the same for the same seed, heavy-tailed and bursty, with
labelled bursts and outages where it says."""

from __future__ import annotations

import numpy as np

from services.injector.realistic import RealisticScenario, RealisticTraffic

START = 1_700_000_000_000


def test_the_same_seed_gives_the_same_counts_and_labels() -> None:
    a = RealisticTraffic(RealisticScenario(keys=20, days=2), START)
    b = RealisticTraffic(RealisticScenario(keys=20, days=2), START)
    assert a.counts() == b.counts() and a.anomalies() == b.anomalies()
    c = RealisticTraffic(RealisticScenario(keys=20, days=2, seed=8), START)
    assert c.counts() != a.counts()


def test_most_keys_are_quiet_and_counts_are_overdispersed() -> None:
    t = RealisticTraffic(RealisticScenario(keys=60, days=2), START)
    medians = t.median_counts()
    assert sum(m <= 3 for m in medians.values()) >= 30  # many low-count keys
    top = t.counts()[t.keys[0]]
    series = np.array([top.get(START + b * 1000, 0) for b in range(t.buckets)], dtype=float)
    # over a short stretch (the rhythm roughly flat) the variance exceeds the mean
    stretch = series[100:160]
    assert stretch.var() > 1.5 * stretch.mean()


def test_labelled_windows_are_in_range_apart_and_after_the_warm_up() -> None:
    sc = RealisticScenario(keys=60, days=4)
    t = RealisticTraffic(sc, START)
    found = t.anomalies()
    assert {a.kind for a in found} == {"SPIKE", "DIP"}
    for a in found:
        assert START + sc.day_s * 1000 <= a.start < a.end < START + t.buckets * 1000
        others = [o for o in found if o.key == a.key and o != a]
        assert all(o.end < a.start or o.start > a.end for o in others)
    # a labelled burst stands out at its onset: the count there is well above the day before
    counts = t.counts()
    burst = next(a for a in found if a.kind == "SPIKE")
    onset = counts[burst.key].get(burst.start, 0)
    before = [counts[burst.key].get(burst.start - k * 1000, 0) for k in range(1, 61)]
    assert onset > np.mean(before) + 5
