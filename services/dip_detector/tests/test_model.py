"""The dip detector's rules on scripted counts (pure)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from services.dip_detector.model import DIP_BUCKETS, WARMUP_BUCKETS, QueryModel, poisson_cdf, poisson_sf


def feed(model: QueryModel, counts: list[int], start: int = 0) -> list[dict[str, Any]]:
    out = []
    for i, c in enumerate(counts):
        b = start + i * 1000
        if c:
            out += model.on_count(b, c)
        out += model.on_bucket_end(b)
    return out


def test_poisson_tails_match_their_sums() -> None:
    lam = 7.5
    pmf = [math.exp(-lam) * lam**k / math.factorial(k) for k in range(60)]
    assert abs(poisson_cdf(3, lam) - sum(pmf[:4])) < 1e-12
    assert abs(poisson_sf(12, lam) - sum(pmf[12:])) < 1e-9
    assert poisson_sf(0, lam) == 1.0 and poisson_cdf(-1, lam) == 0.0


def test_steady_poisson_traffic_raises_nothing() -> None:
    rng = np.random.default_rng(1)
    model = QueryModel(lang="en")
    assert feed(model, rng.poisson(20, 2000).tolist()) == []


def test_a_silence_is_a_dip_after_several_buckets_reported_once_with_its_start() -> None:
    rng = np.random.default_rng(2)
    model = QueryModel(lang="de")
    counts = rng.poisson(10, 60).tolist() + [0] * 8 + rng.poisson(10, 30).tolist()
    out = feed(model, counts)
    assert [(a["kind"], a["start"], a["detected_bucket"]) for a in out] == [
        ("DIP", 60_000, (60 + DIP_BUCKETS - 1) * 1000)
    ]
    assert out[0]["confidence"] >= 0.9999 and out[0]["observed"] == 0


def test_a_spike_is_reported_on_its_first_bucket() -> None:
    rng = np.random.default_rng(3)
    model = QueryModel(lang="en")
    counts = [*rng.poisson(5, 40).tolist(), 60, 70, 65, *rng.poisson(5, 20).tolist()]
    out = feed(model, counts)
    assert [(a["kind"], a["start"]) for a in out] == [("SPIKE", 40_000)]


def test_nothing_before_warm_up_and_a_published_profile_replaces_it() -> None:
    model = QueryModel(lang="en")
    assert feed(model, [50] * (WARMUP_BUCKETS - DIP_BUCKETS) + [0] * DIP_BUCKETS) == []
    fresh = QueryModel(lang="en")
    fresh.update_profile([50.0] * 10, 10_000, version=1)
    assert [a["kind"] for a in feed(fresh, [0, 0, 0, 0])] == ["DIP"]


def test_state_round_trips_through_json() -> None:
    model = QueryModel(lang="ja")
    feed(model, [3, 4, 5])
    assert QueryModel.from_json(model.to_json()) == model
