"""The count model's calibration on pure noise, and its episodes on a burst and an
outage (services/dip_detector/episodes.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from services.dip_detector.episodes import CountModel

DAY = 600
BUDGET = 2.0  # high, so that 20 days of noise give a rate to measure


def _events(model: CountModel, xs: list[int]) -> list[dict[str, Any]]:
    out = []
    for i, x in enumerate(xs):
        out += [{**e, "index": i} for e in model.observe(i * 1000, i, x)]
    return out


def _false_per_day(model: CountModel, volume: float, k: float, days: int = 20) -> float:
    rng = np.random.default_rng(11)
    lam = rng.gamma(1 / k, k * volume, DAY * days) if k else np.full(DAY * days, float(volume))
    opened = [e for e in _events(model, rng.poisson(lam).tolist()) if e["phase"] == "OPEN"]
    return len(opened) / days


@pytest.mark.parametrize(
    ("volume", "k"), [(1, 0.0), (1, 0.2), (10, 0.0), (10, 0.2), (1000, 0.0), (1000, 0.05)]
)
def test_on_pure_noise_false_episodes_stay_within_twice_the_budget(volume: float, k: float) -> None:
    model = CountModel(day=DAY, budget=BUDGET)
    per_day = _false_per_day(model, volume, k)
    print(f"false episodes per day at volume {volume}, k {k}: {per_day}")  # docs/detection.md
    assert per_day <= 2 * BUDGET, (volume, k, per_day)
    assert model.dispersion(0) == pytest.approx(k, abs=0.05)


@pytest.mark.negative_control
def test_negative_control_a_poisson_variance_on_overdispersed_noise_breaks_the_budget() -> None:
    class PoissonModel(CountModel):
        def dispersion(self, scale: int = 0) -> float:
            return 0.0

    assert _false_per_day(PoissonModel(day=DAY, budget=BUDGET), 10, 0.2) > 2 * BUDGET


def test_a_burst_and_its_decay_are_one_episode_and_an_outage_another() -> None:
    rng = np.random.default_rng(5)
    base = np.full(DAY * 3, 20.0)
    t = np.arange(DAY * 3)
    burst_at, outage_at = 1300, 1600
    base *= 1 + 9 * np.where(t >= burst_at, np.exp(-(t - burst_at) / 60), 0)  # 10x, decaying
    base[outage_at : outage_at + 40] *= 0.03
    events = _events(CountModel(day=DAY), rng.poisson(base).tolist())  # the default budget
    opened = [(e["kind"], e["index"]) for e in events if e["phase"] == "OPEN"]
    assert opened == [("SPIKE", burst_at), ("DIP", outage_at)], events
    assert [e["phase"] for e in events] == ["OPEN", "CLOSE", "OPEN", "CLOSE"]


def test_a_second_burst_on_top_of_the_first_is_an_episode_of_its_own() -> None:
    rng = np.random.default_rng(6)
    base = np.full(DAY * 2, 2.0)
    t = np.arange(DAY * 2)
    for at, height in ((900, 4.0), (940, 60.0)):  # a modest burst, then news on top of it
        base *= 1 + (height - 1) * np.where(t >= at, np.exp(-(t - at) / 80), 0)
    events = _events(CountModel(day=DAY), rng.poisson(base).tolist())
    early = [(e["phase"], e["start"] // 1000, e["index"]) for e in events if e["index"] < 1000]
    assert early[1:] == [("CLOSE", 900, 940), ("OPEN", 940, 940)], events
    assert early[0][:2] == ("OPEN", 900) and early[0][2] <= 904, events


def test_two_outages_a_few_buckets_apart_are_two_episodes() -> None:
    rng = np.random.default_rng(7)
    base = np.full(DAY * 2, 8.0)
    base[800:840] = 0.1
    base[848:900] = 0.1  # back for 8 buckets in between
    events = _events(CountModel(day=DAY), rng.poisson(base).tolist())
    opened = [e["index"] for e in events if e["phase"] == "OPEN"]
    assert len(opened) == 2 and 800 <= opened[0] <= 803 and 848 <= opened[1] <= 852, events
