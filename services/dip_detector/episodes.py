"""A key's count model for real traffic, and its anomalies as episodes (pure: no I/O,
no clock; one call per bucket, in bucket order).

**The expectation** of a bucket is ``level * profile(slot)``. The level adapts
(``LEVEL_BUCKETS`` of memory: slow shifts and the weekly rhythm), learned from the
counts divided by the profile, each bucket ``LEARN_LAG`` buckets late (so that an
anomaly's first buckets, before the evidence was enough, are not learned). The daily
profile has ``SLOTS`` slots (or the model job's resolution, up to ``MAX_SLOTS``),
interpolated between their middles: per slot, the counts seen over the level expected
there, both summed with ``PROFILE_DAYS`` of memory and a prior added to each, worth a
day of the slot's records (``PROFILE_PRIOR_DAYS``) and at least ``PROFILE_PRIOR``
records, so that the first buckets of a slot do not make its profile and a small
key's profile stays near the prior until it has seen enough. The prior is flat, or
the shape the model job fitted to the key's history (``set_prior``).

**The variance** is negative binomial (variance ``m + k * m**2``) with a dispersion
``k`` per scale, learned from the key's own residuals (pooled method of moments,
``k = E[(S - M)**2 - M] / E[M**2]`` over the sums ``S`` of the last ``w`` counts and
their expectations ``M``, each squared residual capped at ``WINSOR_SD`` standard
deviations). Learned per scale, it takes in what a per-bucket dispersion cannot: the
level's own error, bursts that last a few buckets, the profile's imperfection. So
significance means the same for a key at 2 per bucket and one at 2,000.

**The threshold** is a false-alarm budget: ``budget`` expected false episodes per key
per day, both directions. Each bucket runs a test per scale and direction (the bucket
alone, and the sums of the last 4 and 16: evidence one quiet bucket of a small key
cannot give); each test's level is the budget split over the day's buckets, the two
directions and the scales (Bonferroni: conservative).

**Episodes.** The first significant bucket opens an episode (``OPEN``, reported at
once: its kind, start and evidence); it closes (``CLOSE``) once the last
``CLOSE_AFTER`` buckets, summed, are no longer beyond their expectation at a weaker
level (``HOLD_P``). Nothing is learned inside an episode, so a burst does not raise
the level and its decay is not taken for a dip. Within a spike, a count far above even
the episode's recent counts is a second burst: the first closes and it opens its own.
An episode that lasts ``MAX_EPISODE_DAYS`` is a new normal: it closes and the level
restarts from the recent counts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from services.dip_detector.counts import lower, upper

BUCKET_MS = 1000
SLOTS = 24  # the profile's slots per day, learned online ...
MAX_SLOTS = 96  # ... or as many as the model job's (up to this: 15 minutes of a day)
SCALES = (1, 4, 16)
LEVEL_BUCKETS = 30  # the level's memory
PROFILE_DAYS = 3.0  # the profile's memory
PROFILE_PRIOR = 20.0  # records' worth of prior in each slot, at least ...
PROFILE_PRIOR_DAYS = 1.0  # ... and at least this many days of the slot's records
DISPERSION_BUCKETS = 1000  # the dispersion's memory
DISPERSION_PRIOR = (0.05, 30)  # k of one bucket (of a sum of w: k / w), and how many buckets it is worth
WINSOR_SD = 5.0
WARMUP_BUCKETS = 30  # no episode before this many buckets
LEARN_LAG = 4  # a bucket is learned from this many buckets later, unless an episode took it
HOLD_P = 0.01
CLOSE_AFTER = 8
MAX_EPISODE_DAYS = 0.25


def _at(values: list[float], pos: float) -> float:
    """``values`` (cyclic) at fractional position ``pos``, linearly interpolated."""
    lo = math.floor(pos)
    frac = pos - lo
    n = len(values)
    return (1 - frac) * values[lo % n] + frac * values[(lo + 1) % n]


@dataclass
class CountModel:
    day: int  # buckets per day
    budget: float = 0.01  # expected false episodes per key per day
    level: float = 0.0
    seen: int = 0
    slots: int = SLOTS
    prior: list[float] = field(default_factory=lambda: [1.0] * SLOTS)
    slot_x: list[float] = field(default_factory=lambda: [0.0] * SLOTS)  # counts seen, per slot
    slot_e: list[float] = field(default_factory=lambda: [0.0] * SLOTS)  # level expected, per slot
    dev: list[float] = field(default_factory=lambda: [0.0] * len(SCALES))  # E[(S - M)^2 - M]
    m2: list[float] = field(default_factory=lambda: [0.0] * len(SCALES))  # E[M^2]
    fitted: int = 0  # buckets the dispersion has learned from (since the profile last changed)
    recent: list[tuple[int, float]] = field(default_factory=list)  # (count, expected), newest last
    unlearned: list[tuple[int, int]] = field(default_factory=list)  # (index, count) not learned yet
    episode: str | None = None  # "SPIKE" | "DIP"
    start: int = 0  # bucket (ms) the episode started at
    since: int = 0  # buckets in the episode

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CountModel:
        data = dict(data)
        data["recent"] = [tuple(x) for x in data.get("recent", [])]
        data["unlearned"] = [tuple(x) for x in data.get("unlearned", [])]
        return cls(**data)

    # -- the model -----------------------------------------------------------------------

    def set_prior(
        self, shape: list[float], bucket: int | None = None, day: int | None = None
    ) -> list[dict[str, Any]]:
        """The profile's prior: a day's shape, e.g. what the model job fitted to the
        key's history, at its resolution (from ``SLOTS`` to ``MAX_SLOTS`` slots: a
        finer one is resampled), over ``day`` buckets if given (the rhythm's period).
        A new resolution or period restarts the online profile.

        A model the job published (``bucket``: the last bucket fed, ms) is in
        expected counts: the level restarts from its mean, the dispersion from its
        prior (the residuals under the old profile say nothing about the new one's),
        and an open episode, judged under the old one, closes (returned)."""
        if not shape:
            return []
        n = min(max(len(shape), SLOTS), MAX_SLOTS)
        resampled = [_at(shape, (s + 0.5) * len(shape) / n - 0.5) for s in range(n)]
        mean = sum(resampled) / n
        if mean <= 0:
            return []
        if n != self.slots or (day is not None and day != self.day):
            self.slots, self.slot_x, self.slot_e = n, [0.0] * n, [0.0] * n
            self.day = self.day if day is None else day
        self.prior = [max(p / mean, 0.01) for p in resampled]
        if bucket is None:
            return []
        self.level = sum(shape) / len(shape)
        self.seen = max(self.seen, WARMUP_BUCKETS)
        self.dev, self.m2, self.fitted = [0.0] * len(SCALES), [0.0] * len(SCALES), 0
        out = []
        if self.episode is not None:
            x, mu = self.recent[-1] if self.recent else (0, 0.0)
            out.append(self._event("CLOSE", bucket, mu, x, 1.0))
            self.episode = None
        self.recent, self.unlearned = [], []
        return out

    def profile(self) -> list[float]:
        """The daily profile, per slot, normalised to a mean of 1."""
        weight = max(PROFILE_PRIOR, PROFILE_PRIOR_DAYS * self.day / self.slots * self.level)
        ratios = [
            (x + weight * p) / (e + weight)
            for x, e, p in zip(self.slot_x, self.slot_e, self.prior, strict=True)
        ]
        mean = sum(ratios) / self.slots
        return [r / mean for r in ratios]

    def slot(self, index: int, profile: list[float] | None = None) -> float:
        """The profile at bucket ``index`` of the day (between the middles of slots,
        interpolated)."""
        prof = self.profile() if profile is None else profile
        return _at(prof, (index % self.day + 0.5) * self.slots / self.day - 0.5)

    def expected(self, index: int) -> float:
        return self.level * self.slot(index)

    def dispersion(self, scale: int = 0) -> float:
        """The learned dispersion of the sums at ``SCALES[scale]``."""
        if self.m2[scale] <= 0:
            return DISPERSION_PRIOR[0] / SCALES[scale]
        return max(0.0, self.dev[scale] / self.m2[scale])

    @property
    def alpha(self) -> float:
        return self.budget / (self.day * 2 * len(SCALES))

    def _learn(self, index: int, x: int, s: float) -> None:
        """Learn from bucket ``index``'s count ``x`` (``s``: the profile there)."""
        self.seen += 1
        self.level += max(1.0 / self.seen, 1.0 / LEVEL_BUCKETS) * (x / max(s, 1e-6) - self.level)
        slot = int((index % self.day) * self.slots / self.day)
        keep = 1.0 - self.slots / (PROFILE_DAYS * self.day)
        self.slot_x[slot] = self.slot_x[slot] * keep + x
        self.slot_e[slot] = self.slot_e[slot] * keep + self.level

    def _learn_dispersion(self) -> None:
        self.fitted += 1
        counts = [c for c, _ in self.recent]
        mus = [m for _, m in self.recent]
        for i, w in enumerate(SCALES):
            if len(counts) < w:
                break
            big_s, big_m = sum(counts[-w:]), sum(mus[-w:])
            k = self.dispersion(i)
            cap = WINSOR_SD**2 * (big_m + k * big_m * big_m)
            r = min((big_s - big_m) ** 2, cap) - big_m
            k0, n0 = DISPERSION_PRIOR
            if self.m2[i] == 0:  # the prior, worth n0 buckets
                self.dev[i], self.m2[i] = k0 / w * big_m * big_m, big_m * big_m
            a = max(1.0 / (self.fitted + n0), 1.0 / DISPERSION_BUCKETS)
            self.dev[i] += a * (r - self.dev[i])
            self.m2[i] += a * (big_m * big_m - self.m2[i])

    def _tests(self) -> tuple[float, float]:
        """The smallest p-value over the scales, upwards and downwards."""
        counts = [c for c, _ in self.recent]
        mus = [m for _, m in self.recent]
        up = down = 1.0
        for i, w in enumerate(SCALES):
            if len(counts) < w:
                break
            m = sum(mus[-w:])
            if m <= 0:
                continue
            total, k = sum(counts[-w:]), self.dispersion(i)
            if total > m:
                up = min(up, upper(total, m, k))
            else:
                down = min(down, lower(total, m, k))
        return up, down

    def _new_onset(self, x: int) -> float | None:
        """Within a spike: the p-value of ``x`` against the episode's last
        ``CLOSE_AFTER`` counts if it is far above even those (a new burst, not this one
        going on or decaying), else None."""
        if self.since < CLOSE_AFTER:
            return None
        m = max(sum(c for c, _ in self.recent[-CLOSE_AFTER - 1 : -1]) / CLOSE_AFTER, self.recent[-1][1])
        p = upper(x, m, self.dispersion(0)) if x > m else 1.0
        return p if p < self.alpha else None

    def _back_to_normal(self) -> bool:
        """The last ``CLOSE_AFTER`` buckets, summed, are no longer beyond their
        expectation in the episode's direction at ``HOLD_P`` (with a dispersion
        between those of the sums of 4 and 16)."""
        last = self.recent[-CLOSE_AFTER:]
        total, m = sum(c for c, _ in last), sum(u for _, u in last)
        k = math.sqrt(self.dispersion(1) * self.dispersion(2))
        p = upper(total, m, k) if self.episode == "SPIKE" else lower(total, m, k)
        return p >= HOLD_P

    def _start(self, bucket: int, kind: str) -> int:
        """Where the anomaly began: back over the buckets at least a standard deviation
        beyond their expectation, in its direction (at most the largest scale)."""
        k = self.dispersion(0)
        back = 0
        for c, m in reversed(self.recent[:-1]):
            sd = math.sqrt(m + k * m * m)
            if not (c > m + sd if kind == "SPIKE" else c < m - sd):
                break
            back += 1
        return bucket - BUCKET_MS * back

    # -- one bucket ----------------------------------------------------------------------

    def observe(self, bucket: int, index: int, x: int) -> list[dict[str, Any]]:
        """The final count ``x`` of bucket ``bucket`` (ms; the ``index``-th bucket of
        the key's days, for the profile): what it opens or closes."""
        prof = self.profile()
        s = self.slot(index, prof)
        if self.seen == 0 and not self.recent and not self.unlearned:
            self.level = x / max(s, 1e-6)
        mu = self.level * s
        self.recent = [*self.recent[-(max(SCALES) - 1) :], (x, mu)]
        up, down = self._tests() if self.seen >= WARMUP_BUCKETS else (1.0, 1.0)
        out: list[dict[str, Any]] = []
        if self.episode is None:
            kind = "SPIKE" if up < self.alpha else "DIP" if down < self.alpha else None
            if kind is not None:
                self.episode, self.start, self.since = kind, self._start(bucket, kind), 0
                out.append(self._event("OPEN", bucket, mu, x, up if kind == "SPIKE" else down))
                # the buckets since its start are the anomaly's: never learned from
                first = index - (bucket - self.start) // BUCKET_MS
                self._learn_all([(i, c) for i, c in self.unlearned if i < first])
        elif self.episode == "SPIKE" and (onset := self._new_onset(x)) is not None:
            # a second burst on top of the first: its own episode
            out.append(self._event("CLOSE", bucket, mu, x, up))
            self.start, self.since = bucket, 0
            out.append(self._event("OPEN", bucket, mu, x, onset))
        if self.episode is not None:
            self.since += 1
            p = up if self.episode == "SPIKE" else down
            normal = self.since >= CLOSE_AFTER and self._back_to_normal()
            if normal or self.since > MAX_EPISODE_DAYS * self.day:
                calm = [c for c, _ in self.recent[-CLOSE_AFTER:]]
                if not normal:  # a new normal: restart the level from now
                    self.level = sum(calm) / len(calm) / max(s, 1e-6)
                else:  # back to normal: what the calm buckets say is learned now
                    self._learn_all([(index - len(calm) + 1 + j, c) for j, c in enumerate(calm)])
                out.append(self._event("CLOSE", bucket, mu, x, p))
                self.episode = None
                self.recent = []  # later tests do not sum over the episode
        else:
            waiting = [*self.unlearned, (index, x)]
            self._learn_all(waiting[:-LEARN_LAG], prof)  # nothing learned since prof was computed
            self.unlearned = waiting[-LEARN_LAG:]
            if self.seen >= WARMUP_BUCKETS:  # residuals around a level still settling are not noise
                self._learn_dispersion()
        return out

    def _learn_all(self, buckets: list[tuple[int, int]], prof: list[float] | None = None) -> None:
        """Learn ``buckets`` in order (``prof``: the profile as it is now, if known:
        the first is learned under it, the rest under the profile as it becomes)."""
        for j, (i, c) in enumerate(buckets):
            self._learn(i, c, self.slot(i, prof if j == 0 else None))
        self.unlearned = []

    def _event(self, phase: str, bucket: int, mu: float, x: int, p: float) -> dict[str, Any]:
        return {
            "phase": phase,
            "kind": self.episode,
            "start": self.start,
            "detected_bucket": bucket,
            "expected": round(mu, 3),
            "observed": float(x),
            "confidence": 1.0 - p,
        }
