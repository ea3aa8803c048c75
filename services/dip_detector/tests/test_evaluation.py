"""The detection score (NAB's standard profile, normalised) and the two baselines."""

from __future__ import annotations

import pytest

from services.dip_detector.evaluation import Report, Window, mad_reports, reward, score, zscore_reports

W = Window("q", 10_000, 19_000)


def test_an_early_report_earns_one_and_a_late_one_almost_nothing() -> None:
    assert reward(W, 10_000) == pytest.approx(1.0)
    assert reward(W, 19_000) == pytest.approx(0.0)
    assert reward(W, 11_000) > reward(W, 15_000) > reward(W, 18_000) > 0


def test_nothing_scores_zero_and_perfect_scores_a_hundred() -> None:
    windows = [W, Window("r", 50_000, 59_000)]
    assert score(windows, [])["score"] == 0.0
    perfect = score(windows, [Report("q", 10_000), Report("r", 50_000)])
    assert perfect["score"] == 100.0 and perfect["precision"] == 1.0 and perfect["recall"] == 1.0
    assert perfect["median_delay_buckets"] == 0 and perfect["reports_per_episode"] == 1.0


def test_false_reports_and_repeats_are_counted_as_the_benchmark_says() -> None:
    windows = [W]
    # three reports in the window (one episode), two outside it, one for another key
    reports = [Report("q", 12_000), Report("q", 13_000), Report("q", 14_000)]
    reports += [Report("q", 30_000), Report("q", 2_000), Report("other", 12_000)]
    s = score(windows, reports)
    raw = reward(W, 12_000) - 3 * 0.11
    assert s["score"] == pytest.approx(round(100 * (raw + 1) / 2, 2))
    assert (s["reports"], s["false_reports"], s["reports_per_episode"]) == (6, 3, 3.0)
    assert s["precision"] == 0.5 and s["median_delay_buckets"] == 2


def test_the_baselines_find_a_plain_spike_and_stay_quiet_on_a_flat_series() -> None:
    flat = {"q": {b * 1000: 10 + (b % 3) for b in range(200)}}
    assert zscore_reports(flat, 0, 199_000) == [] and mad_reports(flat, 0, 199_000) == []
    spiky = {"q": {**flat["q"], 150_000: 80}}
    assert zscore_reports(spiky, 0, 199_000) == [Report("q", 150_000, "SPIKE")]
    assert mad_reports(spiky, 0, 199_000) == [Report("q", 150_000, "SPIKE")]
