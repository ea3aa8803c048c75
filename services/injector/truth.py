"""Comparing what the pipeline found with what the generator scripted."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from services.injector.logs import nominal_second, parse_line

MATCH_SLACK_MS = 2000  # an anomaly may start this much before the scripted event


def load_truth(directory: Path) -> list[dict[str, Any]]:
    path = directory / "truth.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def recount(directory: Path, jitter_ms: int) -> Counter[tuple[str, int]]:
    """Offline: (query, bucket start) -> count over every log file of the directory,
    leaving out records older than their file's second minus the jitter bound (late)."""
    counts: Counter[tuple[str, int]] = Counter()
    for path in directory.iterdir():
        second = nominal_second(path)
        if second is None:
            continue
        for line in path.read_text().splitlines():
            try:
                rec = parse_line(line)
            except ValueError:
                continue
            if rec["ts"] >= second - jitter_ms:
                counts[(rec["query"], rec["ts"] // 1000 * 1000)] += 1
    return counts


def _matches(anomaly: Mapping[str, Any], truth: Mapping[str, Any]) -> bool:
    return bool(
        anomaly["kind"] == truth["kind"]
        and anomaly["query"] == truth["query"]
        and truth["start"] - MATCH_SLACK_MS <= anomaly["start"] < truth["end"]
    )


def score(
    truth: list[dict[str, Any]],
    anomalies: Iterable[Mapping[str, Any]],
    reported_at: Mapping[int, int] | None = None,
    until_ms: int | None = None,
) -> dict[str, Any]:
    """Precision (reported anomalies that match a scripted event), recall (detectable
    scripted events reported) and, given when each was reported (wall ms, by position
    in ``anomalies``), the delay beyond the end of the bucket that decided the report,
    and from the anomaly's start (event time; the generator runs in real time). An
    episode counts once, by its OPEN report (its CLOSE is not a detection)."""
    opened = [(i, a) for i, a in enumerate(anomalies) if a.get("phase", "OPEN") == "OPEN"]
    found = [a for _, a in opened]
    wanted = [t for t in truth if t["detectable"] and (until_ms is None or t["end"] <= until_ms)]
    hits = [a for a in found if any(_matches(a, t) for t in truth)]
    detected = [t for t in wanted if any(_matches(a, t) for a in found)]
    delays, from_start = [], []
    if reported_at:
        for i, a in opened:
            if i in reported_at and any(_matches(a, t) for t in truth):
                delays.append(reported_at[i] - (a["detected_bucket"] + 1000))
                from_start.append(reported_at[i] - a["start"])
    return {
        "anomalies_reported": len(found),
        "scripted_detectable": len(wanted),
        "precision": round(len(hits) / len(found), 4) if found else None,
        "recall": round(len(detected) / len(wanted), 4) if wanted else None,
        "missed": [(t["kind"], t["query"], t["start"]) for t in wanted if t not in detected][:20],
        "false": [(a["kind"], a["query"], a["start"]) for a in found if a not in hits][:20],
        "median_delay_ms": round(statistics.median(delays)) if delays else None,
        "median_delay_from_start_ms": round(statistics.median(from_start)) if from_start else None,
    }
