"""Scoring a detector against labelled anomaly windows, as streaming anomaly
benchmarks do (the Numenta Anomaly Benchmark's standard profile), and two baseline
detectors computed offline on the same counts. Pure: no I/O.

**The score.** Per labelled window (a key and a span of buckets), the earliest report
inside it earns up to 1: ``sigmoid(y) / sigmoid(-1)`` with ``sigmoid(y) = 2 / (1 +
e^(5y)) - 1`` and ``y`` the report's position in the window from -1 (its first bucket)
to 0 (its last), so 1 at the window's start and 0 at its end. Later reports in the
same window earn nothing and cost nothing; a window without a report costs 1; each
report outside every window (of its key) costs 0.11. The raw sum is normalised so that
a detector that reports nothing scores 0 and a perfect one 100:
``100 * (raw + windows) / (2 * windows)``.

**The figures beside it.** Precision: reports inside a window of their key over all
reports. Recall: windows with a report over all windows. Reports per episode: reports
inside windows over windows detected (1.0: one report per anomaly). Median delay: the
first report's bucket minus the window's first bucket, in buckets.

**Baselines** (per key, every bucket after a warm-up of ``window`` buckets):

- ``zscore``: the count's distance from the mean of the previous ``window`` counts, in
  standard deviations; a report when it is at least ``threshold`` either way;
- ``mad``: the same with the median and the median absolute deviation (scaled by
  1.4826 to a standard deviation's units), robust to the outliers in its window.

Both report every bucket over the threshold, as such detectors are usually run; their
scale is floored at one count (counts are integers: a key at 0 or 1 for a minute would
otherwise make any other count infinitely unusual).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BUCKET_MS = 1000
FALSE_REPORT_COST = 0.11
MISSED_WINDOW_COST = 1.0


@dataclass(frozen=True)
class Window:
    """A labelled anomaly: ``key``'s buckets from ``start`` to ``end`` (bucket starts,
    ms, both included)."""

    key: str
    start: int
    end: int
    kind: str = ""


@dataclass(frozen=True)
class Report:
    key: str
    bucket: int  # the bucket (start, ms) whose count made the report
    kind: str = ""


def _sigmoid(y: float) -> float:
    return 2.0 / (1.0 + math.exp(5.0 * y)) - 1.0


def reward(window: Window, bucket: int) -> float:
    """What a first report at ``bucket`` inside ``window`` earns: 1 at its start, 0 at
    its end."""
    span = window.end - window.start
    y = -1.0 if span <= 0 else (bucket - window.end) / span
    return _sigmoid(y) / _sigmoid(-1.0)


def score(windows: Sequence[Window], reports: Iterable[Report]) -> dict[str, Any]:
    """The normalised score and the figures beside it (module docstring)."""
    by_key: dict[str, list[Window]] = {}
    for w in windows:
        by_key.setdefault(w.key, []).append(w)
    first: dict[Window, int] = {}
    inside = outside = 0
    for r in sorted(reports, key=lambda r: r.bucket):
        hit = next((w for w in by_key.get(r.key, ()) if w.start <= r.bucket <= w.end), None)
        if hit is None:
            outside += 1
            continue
        inside += 1
        first.setdefault(hit, r.bucket)
    raw = sum(reward(w, b) for w, b in first.items())
    raw -= MISSED_WINDOW_COST * (len(windows) - len(first)) + FALSE_REPORT_COST * outside
    n = len(windows)
    delays = [(b - w.start) / BUCKET_MS for w, b in first.items()]
    total = inside + outside
    return {
        "score": round(100.0 * (raw + n) / (2 * n), 2) if n else None,
        "precision": round(inside / total, 4) if total else None,
        "recall": round(len(first) / n, 4) if n else None,
        "reports_per_episode": round(inside / len(first), 3) if first else None,
        "median_delay_buckets": statistics.median(delays) if delays else None,
        "reports": total,
        "false_reports": outside,
        "windows": n,
        "missed": n - len(first),
    }


def _series(counts: Mapping[int, int], start: int, end: int) -> list[tuple[int, int]]:
    return [(b, counts.get(b, 0)) for b in range(start, end + 1, BUCKET_MS)]


def _rolling(
    counts: Mapping[str, Mapping[int, int]],
    start: int,
    end: int,
    window: int,
    threshold: float,
    center: Callable[[Sequence[int]], float],
    scale: Callable[[Sequence[int], float], float],
) -> list[Report]:
    """Every key's buckets ``start``..``end`` whose distance from ``center`` of the
    previous ``window`` counts, in units of their ``scale`` (floored at one count), is
    at least ``threshold``."""
    out: list[Report] = []
    for key, series in counts.items():
        recent: deque[int] = deque(maxlen=window)
        for bucket, n in _series(series, start, end):
            if len(recent) == window:
                c = center(recent)
                z = (n - c) / max(scale(recent, c), 1.0)
                if abs(z) >= threshold:
                    out.append(Report(key, bucket, "SPIKE" if z > 0 else "DIP"))
            recent.append(n)
    return out


def zscore_reports(
    counts: Mapping[str, Mapping[int, int]], start: int, end: int, window: int = 60, threshold: float = 4.0
) -> list[Report]:
    """The rolling z-score baseline: mean and standard deviation."""
    return _rolling(counts, start, end, window, threshold, statistics.fmean, _pstdev)


def _pstdev(counts: Sequence[int], mean: float) -> float:
    """The population standard deviation of integer ``counts`` from their exact integer
    sums (``statistics.pstdev`` sums in exact fractions, which took most of a run's time;
    ``mean`` is the caller's, unused)."""
    n, total = len(counts), sum(counts)
    return math.sqrt(n * sum(x * x for x in counts) - total * total) / n


def mad_reports(
    counts: Mapping[str, Mapping[int, int]], start: int, end: int, window: int = 60, threshold: float = 5.0
) -> list[Report]:
    """The rolling median / MAD baseline (the MAD scaled to a standard deviation's units)."""
    return _rolling(
        counts,
        start,
        end,
        window,
        threshold,
        statistics.median,
        lambda r, med: 1.4826 * statistics.median(abs(x - med) for x in r),
    )
