"""The time-of-day profile: learned from weeks of counts, robust to the anomalies in
them, and what the detector's interpolation expects."""

from __future__ import annotations

import numpy as np
import pytest

from services.dip_detector.model import interpolate
from services.model_trainer.profile import fit_profile

PERIOD, SLOTS = 60_000, 30  # a one-minute "day" of 2-second slots


def rate(bucket: int) -> float:
    return float(40.0 + 30.0 * np.sin(2 * np.pi * (bucket % PERIOD) / PERIOD))


def series(days: int, seed: int = 1) -> dict[int, int]:
    rng = np.random.default_rng(seed)
    return {b: int(rng.poisson(rate(b))) for b in range(0, days * PERIOD, 1000)}


def test_the_profile_follows_the_rhythm() -> None:
    counts = series(days=20)
    profile = fit_profile(counts.items(), 0, 20 * PERIOD, PERIOD, SLOTS)
    assert len(profile) == SLOTS
    for b in range(0, PERIOD, 1000):
        assert interpolate(profile, PERIOD, b) == pytest.approx(rate(b), abs=3.0)


def test_anomalies_in_the_training_data_do_not_bend_it() -> None:
    clean = fit_profile(series(days=10).items(), 0, 10 * PERIOD, PERIOD, SLOTS)
    counts = series(days=10)
    for b in range(3 * PERIOD + 10_000, 3 * PERIOD + 20_000, 1000):
        counts[b] = 0  # a dip one day
    for b in range(5 * PERIOD + 30_000, 5 * PERIOD + 36_000, 1000):
        counts[b] *= 8  # a spike another
    robust = fit_profile(counts.items(), 0, 10 * PERIOD, PERIOD, SLOTS)
    assert max(abs(a - b) for a, b in zip(robust, clean, strict=True)) < 3.0


def test_missing_buckets_count_as_zero_and_the_range_is_respected() -> None:
    counts = {b: 4 for b in range(0, 4 * PERIOD, 2000)}  # every other second nothing
    profile = fit_profile(counts.items(), 0, 4 * PERIOD, PERIOD, SLOTS)
    assert profile == [2.0] * SLOTS
    assert fit_profile(counts.items(), PERIOD, PERIOD, PERIOD, SLOTS) == [0.0] * SLOTS


def test_a_period_that_does_not_cut_into_whole_second_slots_is_refused() -> None:
    with pytest.raises(ValueError, match="whole-second slots"):
        fit_profile([], 0, 0, 60_000, 7)
