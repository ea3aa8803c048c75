"""A query's traffic model and the anomaly rules (pure: no I/O, no clock).

The expected count per one-second bucket comes from a time-of-day profile when the
batch job has published one (``model_updates``), else from an exponentially weighted
mean learned online from the buckets seen (anomalous buckets are not learned from).

- **Spike**: as soon as one bucket's count arrives that a Poisson with the expected
  rate would reach with probability under ``SPIKE_P`` (and at least 3x expected):
  reported at once, once per episode.
- **Dip**: evaluated when the watermark says a bucket is complete (a bucket nobody
  searched counts as 0). A run of ``DIP_BUCKETS`` buckets each improbably low
  (``DIP_P``) whose joint probability is under ``1 - DIP_CONFIDENCE`` is reported,
  once per episode, with its start.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

WARMUP_BUCKETS = 15
ALPHA = 0.1
SPIKE_P = 1e-6
SPIKE_RATIO = 3.0
DIP_P = 0.02
DIP_BUCKETS = 3
DIP_CONFIDENCE = 0.9999
MIN_DIP_RATE = 2.0  # below this a quiet bucket is not news
DORMANT_RATE = 0.05  # stop evaluating a query that has gone this quiet


def poisson_cdf(k: int, lam: float) -> float:
    """P(X <= k) for X ~ Poisson(lam)."""
    if k < 0:
        return 0.0
    if lam <= 0:
        return 1.0
    term = math.exp(-lam)
    total = term
    for i in range(1, k + 1):
        term *= lam / i
        total += term
    return min(1.0, total)


def poisson_sf(k: int, lam: float) -> float:
    """P(X >= k), summed from k upwards (accurate in the far tail)."""
    if k <= 0:
        return 1.0
    if lam <= 0:
        return 0.0
    log_term = -lam + k * math.log(lam) - math.lgamma(k + 1)
    total, i = 0.0, k
    while True:
        term = math.exp(log_term)
        total += term
        if term < total * 1e-12 or i > k + 10_000:
            return min(1.0, total)
        i += 1
        log_term += math.log(lam / i)


def interpolate(profile: list[float], period_ms: int, bucket: int) -> float:
    """The profile's expected count for the one-second bucket starting at ``bucket``:
    slot values stand for their slots' middles, linearly interpolated in between
    (cyclically: the period's end meets its start)."""
    slots = len(profile)
    middle = (bucket % period_ms + 500) * slots / period_ms - 0.5
    lo = math.floor(middle)
    frac = middle - lo
    return (1 - frac) * profile[lo % slots] + frac * profile[(lo + 1) % slots]


@dataclass
class QueryModel:
    lang: str = ""
    rate: float = 0.0  # online mean count per bucket
    seen: int = 0  # buckets learned from
    next_bucket: int | None = None  # next bucket to evaluate (None: dormant)
    pending: dict[str, int] = field(default_factory=dict)  # bucket start -> count, not yet evaluated
    dip_start: int | None = None
    dip_len: int = 0
    dip_logp: float = 0.0
    dip_reported: bool = False
    dip_sum: int = 0
    spike: bool = False
    spike_start: int | None = None
    profile: list[float] | None = None
    period_ms: int = 0
    version: int = -1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueryModel:
        return cls(**data)

    # -- the model -----------------------------------------------------------------------

    def expected(self, bucket: int) -> float:
        if self.profile and self.period_ms > 0:
            return interpolate(self.profile, self.period_ms, bucket)
        return self.rate

    @property
    def warm(self) -> bool:
        return bool(self.profile) or self.seen >= WARMUP_BUCKETS

    def learn(self, count: int) -> None:
        self.rate = count if self.seen == 0 else (1 - ALPHA) * self.rate + ALPHA * count
        self.seen += 1

    def update_profile(self, profile: list[float], period_ms: int, version: int) -> None:
        if version > self.version:
            self.profile, self.period_ms, self.version = list(profile), period_ms, version

    # -- the rules -----------------------------------------------------------------------

    def on_count(self, bucket: int, count: int) -> list[dict[str, Any]]:
        """A final count for ``bucket`` arrived. A query's counts arrive in bucket order,
        so every earlier bucket of it is final too: evaluate those first. That makes the
        model at each count the same however the count and the watermark interleave."""
        out = self.evaluate_until(bucket - 1000)
        self.pending[str(bucket)] = count
        if self.next_bucket is None:
            self.next_bucket = bucket
        lam = self.expected(bucket)
        if not self.warm or self.spike:
            return out
        if count >= SPIKE_RATIO * lam + 3 and poisson_sf(count, lam) < SPIKE_P:
            self.spike, self.spike_start = True, bucket
            conf = 1.0 - poisson_sf(count, lam)
            out.append(self._anomaly("SPIKE", bucket, bucket, lam, count, conf))
        return out

    def evaluate_until(self, bucket: int) -> list[dict[str, Any]]:
        """Evaluate every bucket up to ``bucket`` not evaluated yet (the watermark, or a
        later count of the query, says they are complete)."""
        out: list[dict[str, Any]] = []
        while self.next_bucket is not None and self.next_bucket <= bucket:
            out += self.on_bucket_end(self.next_bucket)
        return out

    def on_bucket_end(self, bucket: int) -> list[dict[str, Any]]:
        """The watermark passed ``bucket``: its count is final (0 if none came)."""
        count = self.pending.pop(str(bucket), 0)
        lam = self.expected(bucket)
        out: list[dict[str, Any]] = []
        anomalous = False
        if self.warm and lam >= MIN_DIP_RATE:
            p = poisson_cdf(count, lam)
            if p < DIP_P:
                anomalous = True
                if self.dip_start is None:
                    self.dip_start, self.dip_len, self.dip_logp, self.dip_sum = bucket, 0, 0.0, 0
                self.dip_len += 1
                self.dip_logp += math.log(max(p, 1e-300))
                self.dip_sum += count
                conf = 1.0 - math.exp(self.dip_logp)
                if not self.dip_reported and self.dip_len >= DIP_BUCKETS and conf >= DIP_CONFIDENCE:
                    self.dip_reported = True
                    mean = self.dip_sum / self.dip_len
                    out.append(self._anomaly("DIP", self.dip_start, bucket, lam, mean, conf))
        if not anomalous:
            self.dip_start, self.dip_len, self.dip_logp, self.dip_reported = None, 0, 0.0, False
        if self.spike:
            if count <= 2 * lam + 2:
                self.spike = False
            anomalous = True
        if not anomalous:
            self.learn(count)
        self.next_bucket = bucket + 1000
        if self.rate < DORMANT_RATE and not self.pending and self.dip_start is None and not self.profile:
            self.next_bucket = None
        return out

    def _anomaly(
        self, kind: str, start: int, detected: int, lam: float, observed: float, conf: float
    ) -> dict[str, Any]:
        return {
            "lang": self.lang,
            "kind": kind,
            "start": start,
            "detected_bucket": detected,
            "expected": round(lam, 3),
            "observed": round(float(observed), 3),
            "confidence": conf,
        }
