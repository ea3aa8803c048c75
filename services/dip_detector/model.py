"""A query's detector state: its count model fed bucket by bucket in event time, and
the anomalies it reports (pure: no I/O, no clock).

Every one-second bucket of the query is fed to its ``CountModel``
(``services/dip_detector/episodes.py``) once, in order, with its final count: when
its count arrives (the windower emits a bucket's count once it is final, and a
query's counts in bucket order, so every earlier bucket is final too and one nobody
searched counts 0), or when the watermark passes the bucket's end (a timer) and no
count came. The model is then the same however counts and watermarks interleave.

The anomalies are episodes: ``OPEN`` when one starts (kind, start, the count and
expectation of the bucket that decided it, confidence), ``CLOSE`` when it ends.

A model the batch job published for the query (``model_updates``: expected counts per
slot of a period) becomes the shape the daily profile starts from, its period the
query's day, and its mean the level (no warm-up then).

Bounds, since anyone who can write ``model_updates`` or ``window_counts`` may write
anything (semantics I-12): a model must be one the job could have made (a period of
whole seconds between ``SLOTS`` seconds and ``MAX_PERIOD_MS``, at most
``MAX_PROFILE_SLOTS`` finite, non-negative slots, its version the end of its training
range, no later than the record's time, and no more than ``MODEL_AHEAD_MS`` ahead of
the detector's own clock: the model job trains on what has happened, and a version from
the future would pin the query to a forged model, every genuine one after it not newer),
else ``ValueError`` (the record is a dead letter); and a gap between two buckets is
walked for at most ``MAX_GAP_BUCKETS`` buckets (a longer silence is skipped to its last
hour, as a dormant query's is), so no record can make the model walk months of empty
buckets.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from services.dip_detector.episodes import SLOTS, CountModel

BUCKET_MS = 1000
DAY_BUCKETS = 86_400
MAX_PERIOD_MS = 7 * 86_400_000  # a week: the longest rhythm a model may describe
MAX_PROFILE_SLOTS = 86_400  # one per second of a day
MAX_GAP_BUCKETS = 3_600  # empty buckets walked between two fed ones (an hour)
BUDGET = 0.01  # expected false episodes per query per day
DORMANT_RATE = 0.05  # below this level, outside an episode, zeros wait for the next count


def interpolate(profile: list[float], period_ms: int, bucket: int) -> float:
    """The profile's expected count for the one-second bucket starting at ``bucket``:
    slot values stand for their slots' middles, linearly interpolated in between
    (cyclically: the period's end meets its start)."""
    slots = len(profile)
    middle = (bucket % period_ms + 500) * slots / period_ms - 0.5
    lo = math.floor(middle)
    frac = middle - lo
    return (1 - frac) * profile[lo % slots] + frac * profile[(lo + 1) % slots]


# how far a model's version may be ahead of this detector's clock: the model job's clock
# may run a little ahead of it, never minutes
MODEL_AHEAD_MS = 300_000


def check_model(
    profile: list[float], period_ms: int, version: int, trained_until: int, at: int, now: int | None
) -> None:
    """``ValueError`` unless the model job could have published this model (``at``: its
    record's time; ``now``: the detector's wall clock, None where it has none: a batch
    run over the archive, where the record's time alone bounds it)."""
    if period_ms % BUCKET_MS or not SLOTS * BUCKET_MS <= period_ms <= MAX_PERIOD_MS:
        raise ValueError(f"model refused: period {period_ms} ms is not whole seconds in {SLOTS} s to a week")
    if not 0 < len(profile) <= MAX_PROFILE_SLOTS:
        raise ValueError(f"model refused: {len(profile)} slots (1 to {MAX_PROFILE_SLOTS})")
    if not all(math.isfinite(p) and p >= 0 for p in profile):
        raise ValueError("model refused: a slot that is negative or not a finite number")
    if version != trained_until or version > at:
        raise ValueError(
            f"model refused: version {version} is not its training range's end ({trained_until}) "
            f"at or before its record's time ({at})"
        )
    if now is not None and version > now + MODEL_AHEAD_MS:
        raise ValueError(
            f"model refused: version {version} is {version - now} ms ahead of this detector's clock "
            f"(at most {MODEL_AHEAD_MS}): no model job has trained on the future"
        )


@dataclass
class QueryModel:
    lang: str = ""
    day: int = DAY_BUCKETS  # buckets per day: the profile's period
    budget: float = BUDGET
    last: int | None = None  # the last bucket fed to the model (ms)
    version: int = -1  # of the published model used
    model: CountModel = field(init=False)

    def __post_init__(self) -> None:
        self.model = CountModel(day=self.day, budget=self.budget)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueryModel:
        data = dict(data)
        model = CountModel.from_json(data.pop("model"))
        out = cls(**data)
        out.model = model
        return out

    @property
    def next_bucket(self) -> int | None:
        """The next bucket to evaluate when the watermark passes it; None: dormant
        (a quiet query's zeros are fed when its next count arrives)."""
        if self.last is None:
            return None
        if self.model.episode is None and self.model.level < DORMANT_RATE:
            return None
        return self.last + BUCKET_MS

    def update_profile(
        self, profile: list[float], period_ms: int, version: int, trained_until: int, at: int, now: int | None
    ) -> list[dict[str, Any]]:
        """A model the batch job published (``at``: its record's time; ``now``: the
        detector's wall clock): its profile
        becomes the prior, its period the query's day (an open episode, judged under the
        old model, closes: returned). ``ValueError`` for one the job could not have made."""
        check_model(profile, period_ms, version, trained_until, at, now)
        day = period_ms // BUCKET_MS
        if version <= self.version:
            return []
        self.version, self.day = version, day
        events = self.model.set_prior(profile, -1 if self.last is None else self.last, day)
        return [{"lang": self.lang, **e} for e in events]

    def on_count(self, bucket: int, count: int) -> list[dict[str, Any]]:
        """The final count of ``bucket``: the buckets before it are final too."""
        if self.last is not None and bucket <= self.last:
            return []  # already fed (a count never comes twice: defensive)
        out = self.evaluate_until(bucket - BUCKET_MS)
        return out + self._feed(bucket, count)

    def evaluate_until(self, bucket: int) -> list[dict[str, Any]]:
        """Feed every bucket up to ``bucket`` not fed yet: no count came, so 0. (A
        dormant query's zeros more than a day back are skipped: the same whether its
        timer or its next count brings them.)"""
        out: list[dict[str, Any]] = []
        if self.last is None:
            return out
        self.last = max(self.last, bucket - MAX_GAP_BUCKETS * BUCKET_MS)  # a silence: its last hour
        while self.last + BUCKET_MS <= bucket:
            if self.next_bucket is None:
                self.last = max(self.last, bucket - self.day * BUCKET_MS)
            out += self._feed(self.last + BUCKET_MS, 0)
        return out

    def _feed(self, bucket: int, count: int) -> list[dict[str, Any]]:
        self.last = bucket
        events = self.model.observe(bucket, bucket // BUCKET_MS, count)
        return [{"lang": self.lang, **e} for e in events]
