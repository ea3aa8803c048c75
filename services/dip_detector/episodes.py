"""A key's count model for real traffic, and its anomalies as episodes (pure: no I/O,
no clock; one call per bucket, in bucket order).

**The model.** The expected count of a bucket is ``level * profile(slot)``: a level
that adapts (slow shifts), times a daily profile of ``SLOTS`` slots (interpolated
between their middles) learned online, multiplicatively, while the level follows
what the profile does not explain. Counts are negative binomial around it, with the
key's dispersion ``k`` estimated online (pooled method of moments: ``k = (E[(x-mu)^2]
- E[mu]) / E[mu^2]``), so significance means the same at 2 per bucket and at 2,000.
Only buckets outside episodes are learned from: a burst does not raise the level, so
its decay is not taken for a dip.

**The threshold** is a false-alarm budget: ``budget`` expected false episodes per key
per day, both directions. Each bucket runs ``len(SCALES)`` tests per direction (the
bucket alone, and the sums of the last 4 and 16 buckets: evidence one quiet bucket of
a small key cannot give); each test's level is the budget split over the day's
buckets, the two directions and the tests (Bonferroni: conservative).

**Episodes.** The first significant bucket opens an episode (``open``: reported at
once, its kind and start); while it lasts, buckets beyond the expectation in the same
direction at a weaker level (``HOLD_P``) keep it open, and ``CLOSE_AFTER`` ordinary
buckets in a row close it (``close``); nothing else is reported in between. An episode
that lasts longer than ``MAX_EPISODE_DAYS`` of a day is a new normal: it closes and
the level restarts from the recent counts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from services.dip_detector.counts import lower, upper, window

SLOTS = 24
SCALES = (1, 4, 16)
HOLD_P = 0.01
CLOSE_AFTER = 8
MAX_EPISODE_DAYS = 1.0
WARMUP_DAYS = 1.0  # no episode before the profile has seen a day
LEVEL_DAYS = 0.25  # the level's memory
PROFILE_DAYS = 3.0  # the profile's memory
DISPERSION_DAYS = 2.0


@dataclass
class CountModel:
    day: int  # buckets per day
    budget: float = 0.2  # expected false episodes per key per day
    level: float = 0.0
    profile: list[float] = field(default_factory=lambda: [1.0] * SLOTS)
    sq_err: float = 0.0  # EWMA of (x - mu)^2
    mean_mu: float = 0.0  # EWMA of mu
    mean_mu2: float = 0.0  # EWMA of mu^2
    seen: int = 0
    recent: list[tuple[int, float]] = field(default_factory=list)  # (count, expected), newest last
    episode: str | None = None  # "SPIKE" | "DIP"
    start: int = 0  # bucket (ms) the episode opened at
    since: int = 0  # buckets in the episode
    calm: int = 0  # ordinary buckets in a row within it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CountModel:
        data = dict(data)
        data["recent"] = [tuple(x) for x in data.get("recent", [])]
        return cls(**data)

    # -- the model -----------------------------------------------------------------------

    @property
    def dispersion(self) -> float:
        if self.mean_mu2 <= 0:
            return 0.0
        return max(0.0, (self.sq_err - self.mean_mu) / self.mean_mu2)

    def slot(self, index: int) -> float:
        """The profile at bucket ``index`` of the day (fractional slot, interpolated)."""
        pos = (index % self.day + 0.5) * SLOTS / self.day - 0.5
        lo = math.floor(pos)
        frac = pos - lo
        return (1 - frac) * self.profile[lo % SLOTS] + frac * self.profile[(lo + 1) % SLOTS]

    def expected(self, index: int) -> float:
        return self.level * self.slot(index)

    @property
    def alpha(self) -> float:
        return self.budget / (self.day * 2 * len(SCALES))

    def _learn(self, index: int, x: int, mu: float) -> None:
        self.seen += 1
        n = self.seen
        a_level = max(1.0 / n, 1.0 / (LEVEL_DAYS * self.day))
        s = self.slot(index)
        self.level += a_level * (x / max(s, 1e-6) - self.level)
        if self.level > 0:
            visits = max(1.0, n * SLOTS / self.day)
            a_slot = max(1.0 / visits, SLOTS / (PROFILE_DAYS * self.day))
            slot = int((index % self.day) * SLOTS / self.day)
            self.profile[slot] += a_slot * (x / self.level - self.profile[slot])
            mean = sum(self.profile) / SLOTS
            if mean > 0:
                self.profile = [p / mean for p in self.profile]
                self.level *= mean
        a_k = max(1.0 / n, 1.0 / (DISPERSION_DAYS * self.day))
        self.sq_err += a_k * ((x - mu) ** 2 - self.sq_err)
        self.mean_mu += a_k * (mu - self.mean_mu)
        self.mean_mu2 += a_k * (mu * mu - self.mean_mu2)

    def _tests(self, x: int, mu: float) -> tuple[float, float]:
        """The smallest p-value over the scales, upwards and downwards."""
        k = self.dispersion
        counts = [c for c, _ in self.recent] + [x]
        mus = [m for _, m in self.recent] + [mu]
        up = down = 1.0
        for w in SCALES:
            if len(counts) < w:
                break
            m, kw = window(mus[-w:], k)
            if m <= 0:
                continue
            total = sum(counts[-w:])
            up = min(up, upper(total, m, kw))
            down = min(down, lower(total, m, kw))
        return up, down

    # -- one bucket ----------------------------------------------------------------------

    def observe(self, bucket: int, index: int, x: int) -> list[dict[str, Any]]:
        """The final count ``x`` of bucket ``bucket`` (ms; the ``index``-th bucket since
        the day's start, for the profile): what it opens or closes."""
        mu = self.expected(index)
        warm = self.seen >= WARMUP_DAYS * self.day
        up, down = self._tests(x, mu) if warm else (1.0, 1.0)
        out: list[dict[str, Any]] = []
        if self.episode is None:
            kind = "SPIKE" if up < self.alpha else "DIP" if down < self.alpha else None
            if kind is not None:
                self.episode, self.start, self.since, self.calm = kind, bucket, 0, 0
                out.append(self._event("OPEN", kind, bucket, mu, x, up if kind == "SPIKE" else down))
        if self.episode is not None:
            self.since += 1
            p = up if self.episode == "SPIKE" else down
            beyond = x > mu if self.episode == "SPIKE" else x < mu
            self.calm = 0 if (p < HOLD_P or (beyond and self.since <= CLOSE_AFTER)) else self.calm + 1
            if self.calm >= CLOSE_AFTER or self.since > MAX_EPISODE_DAYS * self.day:
                if self.calm < CLOSE_AFTER:  # a new normal: restart the level from now
                    s = self.slot(index)
                    recent = [c for c, _ in self.recent[-CLOSE_AFTER:]] + [x]
                    self.level = sum(recent) / len(recent) / max(s, 1e-6)
                out.append(self._event("CLOSE", self.episode, bucket, mu, x, p))
                self.episode = None
        else:
            self._learn(index, x, mu)
        self.recent = [*self.recent[-(max(SCALES) - 1) :], (x, mu)]
        return out

    def _event(self, phase: str, kind: str, bucket: int, mu: float, x: int, p: float) -> dict[str, Any]:
        return {
            "phase": phase,
            "kind": kind,
            "start": self.start,
            "detected_bucket": bucket,
            "expected": round(mu, 3),
            "observed": float(x),
            "confidence": 1.0 - p,
        }
