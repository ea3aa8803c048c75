"""Tail probabilities of overdispersed counts (pure).

A count with mean ``mu`` and dispersion ``k`` is negative binomial: variance
``mu + k * mu**2`` (``k = 0``: Poisson). Real per-bucket counts are overdispersed, more
so for popular keys, and a Poisson test on them cries wolf; a test with the key's own
dispersion means the same for a key at 2 per bucket and one at 2,000.

``upper(x, mu, k)`` is P(X >= x), ``lower(x, mu, k)`` P(X <= x), both summed term by
term from ``x`` outwards in log space (accurate far in the tail, where the tests work).
A sum of ``w`` buckets (a window: evidence a single quiet bucket of a small key cannot
give) is tested as one count with the summed mean and a dispersion matched to the
summed variance (``window``).
"""

from __future__ import annotations

import math

_REL = 1e-12
_MAX_TERMS = 100_000


def _log_pmf(x: int, mu: float, k: float) -> float:
    if k <= 1e-9:
        return -mu + x * math.log(mu) - math.lgamma(x + 1)
    r = 1.0 / k
    return (
        math.lgamma(x + r)
        - math.lgamma(r)
        - math.lgamma(x + 1)
        + r * math.log(r / (r + mu))
        + x * math.log(mu / (r + mu))
    )


def _ratio(x: int, mu: float, k: float) -> float:
    """pmf(x + 1) / pmf(x)."""
    if k <= 1e-9:
        return mu / (x + 1)
    r = 1.0 / k
    return (x + r) / (x + 1) * mu / (r + mu)


def upper(x: int, mu: float, k: float = 0.0) -> float:
    """P(X >= x)."""
    if x <= 0:
        return 1.0
    if mu <= 0:
        return 0.0
    mode = mu if k <= 1e-9 else max(0.0, (1.0 - k) * mu)  # below it the terms still grow
    if x <= mode:
        return 1.0 - lower(x - 1, mu, k)
    term = math.exp(_log_pmf(x, mu, k))
    total, i = 0.0, x
    while term > 0 and i < x + _MAX_TERMS:
        total += term
        if term < total * _REL:
            break
        term *= _ratio(i, mu, k)
        i += 1
    return min(1.0, total)


def lower(x: int, mu: float, k: float = 0.0) -> float:
    """P(X <= x)."""
    if x < 0:
        return 0.0
    if mu <= 0:
        return 1.0
    if x >= mu:
        return 1.0 - upper(x + 1, mu, k)
    term = math.exp(_log_pmf(x, mu, k))
    total, i = 0.0, x
    while term > 0 and i >= 0:
        total += term
        if term < total * _REL:
            break
        term /= _ratio(i - 1, mu, k) if i > 0 else math.inf
        i -= 1
    return min(1.0, total)


def window(mus: list[float], k: float) -> tuple[float, float]:
    """(mean, dispersion) of the sum of counts with means ``mus``, each with dispersion
    ``k`` (independent): the sum's variance matched by one negative binomial."""
    m = sum(mus)
    if m <= 0:
        return 0.0, 0.0
    return m, k * sum(u * u for u in mus) / (m * m)
