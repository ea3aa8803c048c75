"""Negative binomial tails against sums computed directly, and Poisson as k -> 0."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.dip_detector.counts import lower, upper, window


def _pmf(x: int, mu: float, k: float) -> float:
    if k == 0:
        return math.exp(-mu + x * math.log(mu) - math.lgamma(x + 1))
    r = 1 / k
    return math.exp(
        math.lgamma(x + r)
        - math.lgamma(r)
        - math.lgamma(x + 1)
        + r * math.log(r / (r + mu))
        + x * math.log(mu / (r + mu))
    )


@pytest.mark.parametrize("mu", [0.3, 2.0, 15.0, 400.0])
@pytest.mark.parametrize("k", [0.0, 0.05, 0.4])
def test_tails_equal_direct_sums(mu: float, k: float) -> None:
    top = int(mu * 6 + 60 + 40 * k * mu)
    pmf = [_pmf(x, mu, k) for x in range(top)]
    for x in sorted({0, 1, int(mu / 2), int(mu), int(mu * 2) + 1, int(mu * 3) + 5}):
        assert upper(x, mu, k) == pytest.approx(1 - sum(pmf[:x]), rel=1e-6, abs=1e-12)
        assert lower(x, mu, k) == pytest.approx(sum(pmf[: x + 1]), rel=1e-6, abs=1e-12)


def test_far_tails_stay_accurate() -> None:
    # P(X >= 60) for Poisson(5): about 1.5e-39, far below 1 - cdf's rounding
    assert upper(60, 5.0) == pytest.approx(sum(_pmf(x, 5.0, 0) for x in range(60, 200)), rel=1e-9)
    assert lower(0, 500.0, 0.0) == pytest.approx(math.exp(-500.0), rel=1e-9)


def test_a_window_sum_matches_a_simulated_sum() -> None:
    rng = np.random.default_rng(3)
    mus, k = [0.5, 1.0, 2.0, 1.5], 0.3
    draws = np.sum([rng.poisson(rng.gamma(1 / k, k * m, 200_000)) for m in mus], axis=0)
    m, ks = window(mus, k)
    assert draws.mean() == pytest.approx(m, rel=0.01)
    assert draws.var() == pytest.approx(m + ks * m * m, rel=0.03)
