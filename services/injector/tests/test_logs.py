"""The generator's scenario and the log format (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.injector.generator import generate
from services.injector.logs import nominal_second, parse_line
from services.injector.scenario import Scenario, Traffic


def test_a_second_of_traffic_is_deterministic_jittered_and_bounded() -> None:
    sc = Scenario(seed=4)
    a, b = Traffic(sc, 1_000_000), Traffic(sc, 1_000_000)
    recs = a.second(12)
    assert recs == b.second(12)
    assert abs(len(recs) - sc.rate * a.multiplier(12)) < 5 * (sc.rate**0.5)
    base = 1_000_000 + 12 * 1000
    assert all(base - sc.jitter_ms <= ts < base + 1000 for ts, *_ in recs)
    assert any(ts < base for ts, *_ in recs)  # out of order across files


def test_scripted_events_change_the_traffic_and_are_in_the_truth() -> None:
    tr = Traffic(Scenario(seed=5), 0)
    dip = next(e for e in tr.events if e.kind == "DIP")
    during = {q for _, q, lang, _ in tr.second(dip.start_s + 1) if lang == dip.lang}
    assert during == set()
    truth = [t for t in tr.truth() if t["kind"] == "DIP" and t["start"] == dip.start_s * 1000]
    assert truth and all(t["lang"] == dip.lang for t in truth)
    assert any(t["detectable"] for t in truth)


def test_generated_files_parse_and_carry_their_second(tmp_path: Path) -> None:
    n = generate(tmp_path, Scenario(rate=200), start_ms=5_000_000, seconds=3, realtime=False)
    files = sorted(p for p in tmp_path.iterdir() if nominal_second(p) is not None)
    assert [nominal_second(p) for p in files] == [5_000_000, 5_001_000, 5_002_000]
    lines = [line for p in files for line in p.read_text().splitlines()]
    assert len(lines) == n and all(parse_line(line)["query"] for line in lines)
    assert (tmp_path / "truth.jsonl").exists() and (tmp_path / "scenario.json").exists()


@pytest.mark.parametrize(
    "line",
    [
        "{",
        "[]",
        '{"ts": "x", "query": "q", "lang": "en", "user": 1}',
        '{"ts": 1}',
        '{"ts": 1, "query": "q", "lang": "en", "user": true}',  # a bool is not an int
        '{"ts": 1, "query": "q", "lang": "en", "user": 1, "x": NaN}',  # strict JSON, any field
        '{"ts": 1, "query": "\\ud800", "lang": "en", "user": 1}',  # a lone surrogate
        '{"ts": 1, "query": "q", "lang": "en", "user": 18446744073709551616}',  # past 64 bits
        "[" * 2000 + "]" * 2000,  # nested too deep
    ],
)
def test_malformed_lines_are_explained(line: str) -> None:
    with pytest.raises(ValueError):
        parse_line(line)
