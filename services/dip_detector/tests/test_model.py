"""A query's detector state on scripted counts (pure): episodes, warm-up, published
models, and the same result however counts and watermarks interleave."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from services.dip_detector.episodes import WARMUP_BUCKETS
from services.dip_detector.model import MAX_GAP_BUCKETS, QueryModel

DAY = 600
NOW = 1_700_000_000_000  # the detector's wall clock


def feed(
    model: QueryModel, counts: list[int], start: int = 0, watermark: bool = True
) -> list[dict[str, Any]]:
    """Each bucket's count as the windower sends it (none for 0), then (``watermark``)
    the watermark past the bucket's end."""
    out = []
    for i, c in enumerate(counts):
        b = start + i * 1000
        if c:
            out += model.on_count(b, c)
        if watermark:
            out += model.evaluate_until(b)
    return out


def opened(events: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(e["kind"], e["start"]) for e in events if e["phase"] == "OPEN"]


def test_steady_poisson_traffic_raises_nothing() -> None:
    rng = np.random.default_rng(1)
    assert feed(QueryModel(lang="en", day=DAY), rng.poisson(20, 3000).tolist()) == []


def test_a_silence_is_one_dip_episode_opened_at_once_with_its_start_then_closed() -> None:
    rng = np.random.default_rng(2)
    counts = rng.poisson(10, 60).tolist() + [0] * 8 + rng.poisson(10, 30).tolist()
    out = feed(QueryModel(lang="de", day=DAY), counts)
    assert [(e["phase"], e["kind"], e["start"]) for e in out] == [
        ("OPEN", "DIP", 60_000),
        ("CLOSE", "DIP", 60_000),
    ]
    assert out[0]["detected_bucket"] <= 63_000 and out[0]["confidence"] > 0.9999 and out[0]["lang"] == "de"
    assert out[1]["detected_bucket"] > 68_000  # after the silence


def test_a_spike_is_reported_on_its_first_bucket_and_its_decay_is_not_a_dip() -> None:
    rng = np.random.default_rng(3)
    decay = [int(5 + 60 * 0.9**i) for i in range(40)]
    counts = [*rng.poisson(5, 60).tolist(), *decay, *rng.poisson(5, 60).tolist()]
    out = feed(QueryModel(lang="en", day=DAY), counts)
    assert opened(out) == [("SPIKE", 60_000)]
    assert out[0]["detected_bucket"] == 60_000
    assert [e["phase"] for e in out] == ["OPEN", "CLOSE"]


def test_nothing_before_warm_up_and_a_published_model_skips_it() -> None:
    assert feed(QueryModel(lang="en", day=DAY), [50] * (WARMUP_BUCKETS - 3) + [0] * 3) == []
    fresh = QueryModel(lang="en", day=DAY)
    fresh.update_profile([50.0] * 10, DAY * 1000, 1, 1, 1, NOW)
    assert opened(feed(fresh, [50, 0, 0, 0, 0])) == [("DIP", 1000)]
    other_period = QueryModel(lang="en", day=DAY)
    other_period.update_profile([50.0] * 30, 120_000, 1, 1, 1, NOW)  # the model's period is the query's day
    assert other_period.day == other_period.model.day == 120 and other_period.model.slots == 30
    assert not other_period.update_profile([50.0] * 30, 120_000, 1, 1, 5, NOW)  # not newer: ignored
    assert other_period.version == 1
    ahead = NOW + 60_000  # the model job's clock a minute ahead of the detector's: taken
    assert other_period.update_profile([50.0] * 30, 120_000, ahead, ahead, ahead, NOW) == []
    assert other_period.version == ahead


@pytest.mark.parametrize(
    ("profile", "period_ms", "version", "trained_until", "at", "why"),
    [
        ([50.0] * 30, 10**15, 5, 5, 5, "period"),  # months of buckets per day
        ([50.0] * 30, 10_000, 5, 5, 5, "period"),  # shorter than the slots
        ([50.0] * 30, 120_500, 5, 5, 5, "period"),  # not whole seconds
        ([], 120_000, 5, 5, 5, "slots"),
        ([float("nan")] * 30, 120_000, 5, 5, 5, "finite"),
        ([50.0] * 30, 120_000, 2**62, 5, 5, "version"),  # would lock out every later model
        ([50.0] * 30, 120_000, 2**62, 2**62, 5, "version"),  # from the future of its own record
        # an hour ahead of the detector's clock, its record stamped as far ahead
        ([50.0] * 30, 120_000, NOW + 3_600_000, NOW + 3_600_000, NOW + 3_600_000, "ahead of this detector"),
    ],
)
def test_a_model_the_job_could_not_have_made_is_refused(
    profile: list[float], period_ms: int, version: int, trained_until: int, at: int, why: str
) -> None:
    model = QueryModel(lang="en", day=DAY)
    with pytest.raises(ValueError, match=why):
        model.update_profile(profile, period_ms, version, trained_until, at, NOW)
    assert model.version == -1 and model.day == DAY  # nothing taken


def test_a_count_far_ahead_walks_at_most_an_hour_of_empty_buckets() -> None:
    model = QueryModel(lang="en", day=DAY)
    feed(model, [50] * 100)
    walked: list[int] = []
    observe = model.model.observe

    def counted(bucket: int, index: int, count: int) -> list[dict[str, Any]]:
        walked.append(bucket)
        return observe(bucket, index, count)

    model.model.observe = counted  # type: ignore[method-assign,assignment]
    model.on_count(10**12, 50)  # thirty years on: an hour of zeros, then the count
    assert model.last == 10**12 and 0 < len(walked) <= MAX_GAP_BUCKETS + 1


def test_counts_alone_and_counts_with_watermarks_give_the_same_anomalies() -> None:
    rng = np.random.default_rng(4)
    counts = rng.poisson(8, 200).tolist()
    counts[100:110] = [0] * 10
    counts[150:153] = [90, 80, 70]
    with_watermarks = feed(QueryModel(lang="fr", day=DAY), counts)
    lazy = QueryModel(lang="fr", day=DAY)
    alone = feed(lazy, counts, watermark=False) + lazy.evaluate_until(199_000)
    assert opened(with_watermarks) == [("DIP", 100_000), ("SPIKE", 150_000)]
    assert [(e["phase"], e["kind"], e["start"]) for e in alone] == [
        (e["phase"], e["kind"], e["start"]) for e in with_watermarks
    ]


def test_a_quiet_query_is_dormant_until_its_next_count() -> None:
    model = QueryModel(lang="pt", day=DAY)
    feed(model, [1] + [0] * 200)
    assert model.next_bucket is None
    feed(model, [3], start=400_000)
    assert model.last == 400_000  # the zeros in between were fed on its arrival
    seen = model.model.seen
    model.on_count(400_000 + 10 * DAY * 1000, 2)  # ten days later: only the last day's zeros
    assert model.model.seen <= seen + DAY + 100  # (and the few before it went dormant again)


def test_state_round_trips_through_json() -> None:
    model = QueryModel(lang="ja", day=DAY)
    feed(model, [3, 4, 5] * 20)
    assert QueryModel.from_json(model.to_json()) == model
