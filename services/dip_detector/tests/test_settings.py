"""The detector's settings: defaults, and a bad value named at start."""

from __future__ import annotations

import pytest

from mwcore import ConfigError
from services.dip_detector.computation import DipDetector
from services.dip_detector.settings import DetectorSettings


def test_defaults_are_a_real_day_and_a_budget_of_one_in_a_hundred_days(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MW_DETECTOR_DAY_S", raising=False)
    monkeypatch.delenv("MW_DETECTOR_BUDGET", raising=False)
    detector = DipDetector()
    assert (detector.day, detector.budget) == (86_400, 0.01)
    given = DipDetector(DetectorSettings(detector_day_s=600, detector_budget=0.5))
    assert (given.day, given.budget) == (600, 0.5)


@pytest.mark.parametrize(("name", "value"), [("MW_DETECTOR_BUDGET", "-1"), ("MW_DETECTOR_DAY_S", "10")])
def test_a_bad_value_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        DipDetector()
