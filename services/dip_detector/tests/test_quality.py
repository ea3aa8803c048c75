"""The detector's quality on the realistic scenario, what issue 17 asks of it (the
same figures as ``bench/detection.py``, whose harness run equals this offline one):
a normalised score of at least 80 and 20 points above the better of the two
baselines, at most 1.2 reports per labelled episode, and no more labelled windows
missed than the baselines miss. The negative control gives the model a Poisson
variance: the targets are missed."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from services.dip_detector.episodes import CountModel
from services.dip_detector.evaluation import Report, Window, mad_reports, score, zscore_reports
from services.dip_detector.offline import detect
from services.injector.realistic import RealisticScenario, RealisticTraffic

START_MS = 1_700_006_400_000
SCENARIO = RealisticScenario()


@cache
def _traffic() -> RealisticTraffic:
    return RealisticTraffic(SCENARIO, START_MS)


def _end() -> int:
    return START_MS + (_traffic().buckets - 1) * 1000


def _windows() -> list[Window]:
    return [Window(a.key, a.start, a.end, a.kind) for a in _traffic().anomalies()]


@cache
def _baselines() -> tuple[dict[str, Any], dict[str, Any]]:
    counts = _traffic().counts()
    return (
        score(_windows(), zscore_reports(counts, START_MS, _end())),
        score(_windows(), mad_reports(counts, START_MS, _end())),
    )


def _ours() -> dict[str, Any]:
    traffic = _traffic()
    flat = {(key, bucket): n for key, series in traffic.counts().items() for bucket, n in series.items()}
    found = detect(flat, traffic.langs, _end(), day=SCENARIO.day_s)
    return score(
        _windows(), [Report(a["query"], a["detected_bucket"]) for a in found if a["phase"] == "OPEN"]
    )


def _meets_the_targets(ours: dict[str, Any]) -> bool:
    baselines = _baselines()
    best = max(b["score"] for b in baselines)
    return bool(
        ours["score"] >= 80
        and ours["score"] >= best + 20
        and ours["reports_per_episode"] <= 1.2
        and ours["missed"] <= min(b["missed"] for b in baselines)
    )


@pytest.mark.slow
def test_on_the_realistic_scenario_the_detector_meets_the_targets() -> None:
    ours = _ours()
    assert _meets_the_targets(ours), (ours, _baselines())


@pytest.mark.slow
@pytest.mark.negative_control
def test_negative_control_with_a_poisson_variance_the_targets_are_missed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(CountModel, "dispersion", lambda self, scale=0: 0.0)
    ours = _ours()
    assert not _meets_the_targets(ours), ours
