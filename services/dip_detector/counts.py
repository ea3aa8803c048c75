"""Tail probabilities of overdispersed counts (pure).

A count with mean ``mu`` and dispersion ``k`` is negative binomial: variance
``mu + k * mu**2`` (``k = 0``: Poisson). Real per-bucket counts are overdispersed, more
so for popular keys, and a Poisson test on them cries wolf; a test with the key's own
dispersion means the same for a key at 2 per bucket and one at 2,000.

``upper(x, mu, k)`` is P(X >= x), ``lower(x, mu, k)`` P(X <= x), from SciPy's
regularised incomplete beta and gamma functions (a negative binomial's cdf is
``I_p(r, x + 1)``, a Poisson's ``Q(x + 1, mu)``): about a microsecond each whatever
the mean, and accurate far in the tail, where the tests work, because each tail is
computed directly rather than as one minus the other. A sum of ``w`` buckets (a
window: evidence a single quiet bucket of a small key cannot give) is tested as one
count with the summed mean and a dispersion matched to the summed variance
(``window``).
"""

from __future__ import annotations

from scipy.special import betainc, betaincc, gammainc, gammaincc

POISSON_K = 1e-9  # below this dispersion, the count is Poisson


def upper(x: int, mu: float, k: float = 0.0) -> float:
    """P(X >= x)."""
    if x <= 0:
        return 1.0
    if mu <= 0:
        return 0.0
    if k <= POISSON_K:
        return float(gammainc(x, mu))
    r = 1.0 / k
    return float(betaincc(r, x, r / (r + mu)))


def lower(x: int, mu: float, k: float = 0.0) -> float:
    """P(X <= x)."""
    if x < 0:
        return 0.0
    if mu <= 0:
        return 1.0
    if k <= POISSON_K:
        return float(gammaincc(x + 1, mu))
    r = 1.0 / k
    return float(betainc(r, x + 1, r / (r + mu)))


def window(mus: list[float], k: float) -> tuple[float, float]:
    """(mean, dispersion) of the sum of counts with means ``mus``, each with dispersion
    ``k`` (independent): the sum's variance matched by one negative binomial."""
    m = sum(mus)
    if m <= 0:
        return 0.0, 0.0
    return m, k * sum(u * u for u in mus) / (m * m)
