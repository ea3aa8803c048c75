"""The count model's calibration on pure noise, and its episodes on a burst and an
outage (services/dip_detector/episodes.py)."""

from __future__ import annotations

import numpy as np
import pytest

from services.dip_detector.episodes import CountModel

DAY = 600
BUDGET = 0.5


def _events(model: CountModel, xs: list[int]) -> list[dict[str, object]]:
    out = []
    for i, x in enumerate(xs):
        out += [{**e, "index": i} for e in model.observe(i * 1000, i, x)]
    return out


@pytest.mark.parametrize(("volume", "k"), [(1, 0.0), (1, 0.2), (10, 0.0), (10, 0.2), (1000, 0.0)])
def test_on_pure_noise_false_episodes_stay_within_twice_the_budget(volume: float, k: float) -> None:
    days = 12
    rng = np.random.default_rng(11)
    lam = rng.gamma(1 / k, k * volume, DAY * days) if k else np.full(DAY * days, float(volume))
    model = CountModel(day=DAY, budget=BUDGET)
    opened = [e for e in _events(model, rng.poisson(lam).tolist()) if e["phase"] == "OPEN"]
    per_day = len(opened) / (days - 1)  # (the first day is the warm-up)
    assert per_day <= 2 * BUDGET, (volume, k, per_day)
    assert model.dispersion == pytest.approx(k, abs=0.05)


def test_a_burst_and_its_decay_are_one_episode_and_an_outage_another() -> None:
    rng = np.random.default_rng(5)
    base = np.full(DAY * 3, 20.0)
    t = np.arange(DAY * 3)
    burst_at, outage_at = 1300, 1600
    base *= 1 + 9 * np.where(t >= burst_at, np.exp(-(t - burst_at) / 60), 0)  # 10x, decaying
    base[outage_at : outage_at + 40] *= 0.03
    events = _events(CountModel(day=DAY, budget=BUDGET), rng.poisson(base).tolist())
    opened = [(e["kind"], e["index"]) for e in events if e["phase"] == "OPEN"]
    assert opened == [("SPIKE", burst_at), ("DIP", outage_at)], events
    assert [e["phase"] for e in events] == ["OPEN", "CLOSE", "OPEN", "CLOSE"]
