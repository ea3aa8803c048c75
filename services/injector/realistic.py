"""A realistic scenario beside the scripted one: bursty, overdispersed counts with
labelled anomaly windows, the kind of series real mention or query counts are.

Per key (one query), per one-second bucket of a compressed day (``day_s`` buckets):

- **popularity** heavy-tailed (Zipf): a few keys at hundreds per bucket, most at a few
  or less than one;
- **rhythm**: a daily profile (a smooth day and a night, its own phase per language)
  and a weekly one (weekend days lower);
- **overdispersion**: counts are negative binomial, variance ``mu + k * mu^2`` with a
  per-key ``k`` (0.05 to 0.4): noisier than Poisson, more so for popular keys;
- **slow level shifts**: the key's level drifts (a slow random walk in log space);
- **ordinary bursts**: now and then 1.5 to 3 times the level for a few buckets,
  decaying: part of normal traffic, not labelled;
- **labelled anomalies**: news-like bursts (5 to 20 times the level at onset, then an
  exponential decay over 30 to 200 buckets) and outages (the count falls to 3% of
  its level for 30 to 90 buckets, on keys of at least ``min_dip_rate`` per bucket).
  Each is a window from its onset to ``window_buckets`` later (the decay after a
  burst, or the end of an outage): a detector should report it once, early.

Pure: ``counts()`` and ``windows()`` are the same for the same scenario.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from services.injector.scenario import LANGUAGES, WORDS

BUCKET_MS = 1000


@dataclass(frozen=True)
class RealisticScenario:
    seed: int = 7
    keys: int = 120
    day_s: int = 600  # buckets per compressed day
    days: int = 7  # a compressed week
    rate: float = 400.0  # records per bucket over all keys, at the rhythm's mean
    zipf: float = 1.3
    rhythm: float = 0.5  # daily amplitude
    weekend: float = 0.7  # weekend days' level
    drift: float = 0.002  # the level's random walk, per bucket (log space)
    ordinary_bursts_per_day: float = 1.0  # per key
    bursts_per_week: float = 0.6  # labelled, per key
    outages_per_week: float = 1.5  # labelled, per key of enough volume
    min_dip_rate: float = 3.0
    warmup_days: int = 1  # no labelled anomaly in the first day
    window_buckets: int = 60


@dataclass(frozen=True)
class Anomaly:
    key: str
    kind: str  # "SPIKE" | "DIP"
    start: int  # bucket start, ms
    end: int  # last bucket of its window, ms


@dataclass
class RealisticTraffic:
    scenario: RealisticScenario
    start_ms: int
    keys: list[str] = field(init=False)
    langs: dict[str, str] = field(init=False)
    _counts: dict[str, np.ndarray] = field(init=False)
    _anomalies: list[Anomaly] = field(init=False)

    @property
    def buckets(self) -> int:
        return self.scenario.day_s * self.scenario.days

    def __post_init__(self) -> None:
        sc = self.scenario
        rng = np.random.default_rng(sc.seed)
        shares = 1.0 / np.arange(1, sc.keys + 1) ** sc.zipf
        shares /= shares.sum()
        self.keys, self.langs = [], {}
        self._counts, self._anomalies = {}, []
        t = np.arange(self.buckets)
        day_pos = (t % sc.day_s) / sc.day_s
        weekday = (t // sc.day_s) % 7
        for i in range(sc.keys):
            lang = LANGUAGES[i % len(LANGUAGES)]
            key = f"{lang}:{WORDS[i % len(WORDS)]}-{i}"
            self.keys.append(key)
            self.langs[key] = lang
            phase = LANGUAGES.index(lang) / len(LANGUAGES) * 0.3
            daily = 1.0 + sc.rhythm * np.sin(2 * math.pi * (day_pos - phase))
            weekly = np.where(weekday >= 5, sc.weekend, 1.0)
            level = np.exp(np.cumsum(rng.normal(0.0, sc.drift, self.buckets)))
            base = sc.rate * shares[i] * daily * weekly * level
            mu = base * self._bursts(rng, sc.ordinary_bursts_per_day * sc.days, (1.5, 3.0), (3, 15))
            mu, anomalies = self._labelled(rng, key, base, mu)
            k = rng.uniform(0.05, 0.4)
            # negative binomial with mean mu, variance mu + k mu^2: a Poisson of a gamma
            lam = rng.gamma(1.0 / k, k * mu)
            self._counts[key] = rng.poisson(lam)
            self._anomalies += anomalies

    def _bursts(
        self,
        rng: np.random.Generator,
        n: float,
        height: tuple[float, float],
        decay: tuple[int, int],
    ) -> np.ndarray:
        """A multiplier with ``n`` (on average) decaying bursts."""
        factor = np.ones(self.buckets)
        for _ in range(int(rng.poisson(n))):
            at = int(rng.integers(0, self.buckets))
            factor *= self._burst(at, rng.uniform(*height), int(rng.integers(*decay)))
        return factor

    def _burst(self, at: int, height: float, decay: int) -> np.ndarray:
        t = np.arange(self.buckets) - at
        shape = np.where(t >= 0, np.exp(-np.maximum(t, 0) / decay), 0.0)
        return 1.0 + (height - 1.0) * shape

    def _labelled(
        self, rng: np.random.Generator, key: str, base: np.ndarray, mu: np.ndarray
    ) -> tuple[np.ndarray, list[Anomaly]]:
        sc = self.scenario
        first = sc.warmup_days * sc.day_s
        anomalies: list[Anomaly] = []
        taken: list[tuple[int, int]] = []
        if first >= self.buckets:  # all warm-up: nothing labelled
            return mu, anomalies

        def free(a: int, b: int) -> bool:
            return b < self.buckets and all(b < s or a > e for s, e in taken)

        for _ in range(int(rng.poisson(sc.bursts_per_week * sc.days / 7))):
            at = int(rng.integers(first, self.buckets))
            # a burst must stand out: at least ~10 extra records at onset
            height = max(float(rng.uniform(5.0, 20.0)), 1.0 + 10.0 / max(float(base[at]), 0.05))
            end = at + sc.window_buckets - 1
            if not free(at, end):
                continue
            mu = mu * self._burst(at, height, int(rng.integers(30, 200)))
            taken.append((at, end))
            anomalies.append(Anomaly(key, "SPIKE", self._ms(at), self._ms(end)))
        for _ in range(int(rng.poisson(sc.outages_per_week * sc.days / 7))):
            at = int(rng.integers(first, self.buckets))
            length = int(rng.integers(30, 90))
            end = at + max(length, sc.window_buckets) - 1
            if not free(at, end) or float(np.mean(base[at : at + length])) < sc.min_dip_rate:
                continue
            mu = mu.copy()
            mu[at : at + length] *= 0.03
            taken.append((at, end))
            anomalies.append(Anomaly(key, "DIP", self._ms(at), self._ms(end)))
        return mu, anomalies

    def _ms(self, bucket: int) -> int:
        return self.start_ms + bucket * BUCKET_MS

    def counts(self) -> dict[str, dict[int, int]]:
        """key -> bucket start (ms) -> count, the zero buckets left out."""
        out: dict[str, dict[int, int]] = {}
        for key, series in self._counts.items():
            out[key] = {self._ms(int(b)): int(series[b]) for b in np.flatnonzero(series)}
        return out

    def anomalies(self) -> list[Anomaly]:
        return sorted(self._anomalies, key=lambda a: (a.start, a.key))

    def median_counts(self) -> dict[str, float]:
        return {k: float(np.median(v)) for k, v in self._counts.items()}
