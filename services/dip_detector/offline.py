"""The detector's rules run offline over final window counts (for checking a streaming
run, and as the start of a batch job): the same model code in the same order, so the
result is what the streaming detector reports, however its inputs interleaved."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from services.dip_detector.model import BUDGET, DAY_BUCKETS, QueryModel


def detect(
    counts: Mapping[tuple[str, int], int],
    langs: Mapping[str, str],
    horizon: int,
    day: int = DAY_BUCKETS,
    budget: float = BUDGET,
) -> list[dict[str, Any]]:
    """Anomalies over ``counts`` ((query, bucket start) -> count), every bucket up to
    ``horizon`` (a bucket start) evaluated (``day``, ``budget``: the detector's
    settings)."""
    by_query: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for (query, bucket), n in counts.items():
        if n and bucket <= horizon:
            by_query[query].append((bucket, n))
    out: list[dict[str, Any]] = []
    for query, buckets in sorted(by_query.items()):
        model = QueryModel(lang=langs.get(query, ""), day=day, budget=budget)
        found: list[dict[str, Any]] = []
        for bucket, n in sorted(buckets):
            found += model.on_count(bucket, n)
        found += model.evaluate_until(horizon)
        out += [{"query": query, **a} for a in found]
    return out
