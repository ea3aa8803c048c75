"""Detection quality: the dip detector against two baselines on labelled counts.

Run: ``.venv/bin/python bench/detection.py [--days 7] [--keys 120]``

The realistic scenario (``services/injector/realistic.py``: heavy-tailed popularity,
overdispersed counts, daily and weekly rhythm, slow level shifts, ordinary bursts,
and labelled news-like bursts and outages) gives each key's count per one-second
bucket. The project's detector runs over them through ``mwcore.testing.Harness`` (the
``DipDetector`` computation as the service runs it: a window count per non-zero
bucket, in bucket order, the watermark advanced bucket by bucket so its timers
fire); the rolling z-score and rolling median/MAD baselines run offline on the same
counts. Each is scored by ``services/dip_detector/evaluation.py`` (the benchmark's
normalised score: 0 for reporting nothing, 100 for perfect; precision, recall,
reports per episode, median delay in buckets).

The last line is JSON: ``{"realistic": {"project": {...}, "zscore": {...}, "mad":
{...}}}``, each with ``score``, ``precision``, ``recall``, ``reports_per_episode`` and
``median_delay_buckets``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # services.*

from mwcore.testing import Harness
from services.dip_detector.computation import DipDetector
from services.dip_detector.evaluation import Report, Window, mad_reports, score, zscore_reports
from services.injector.realistic import RealisticScenario, RealisticTraffic

START_MS = 1_700_000_000_000


def project_reports(traffic: RealisticTraffic, counts: dict[str, dict[int, int]]) -> list[Report]:
    """The detector's anomalies over the counts, through the harness, in event time."""
    h = Harness(DipDetector)
    by_bucket: dict[int, list[tuple[str, int]]] = {}
    for key, series in counts.items():
        for bucket, n in series.items():
            by_bucket.setdefault(bucket, []).append((key, n))
    for b in range(traffic.buckets):
        bucket = START_MS + b * 1000
        for key, n in by_bucket.get(bucket, ()):
            value = {"query": key, "lang": traffic.langs[key], "bucket_start": bucket, "count": n}
            h.send("window_counts", value, bucket + 999, key=key, decoded=True)
        h.advance_watermark(bucket + 999)
    return [Report(str(a["query"]), int(a["detected_bucket"]), str(a["kind"])) for a in h.values("anomalies")]


def run(scenario: RealisticScenario) -> dict[str, Any]:
    traffic = RealisticTraffic(scenario, START_MS)
    counts = traffic.counts()
    windows = [Window(a.key, a.start, a.end, a.kind) for a in traffic.anomalies()]
    end = START_MS + (traffic.buckets - 1) * 1000
    t = time.perf_counter()
    results = {"project": score(windows, project_reports(traffic, counts))}
    took = time.perf_counter() - t
    results["zscore"] = score(windows, zscore_reports(counts, START_MS, end))
    results["mad"] = score(windows, mad_reports(counts, START_MS, end))
    medians = sorted(traffic.median_counts().values())
    bursts = sum(w.kind == "SPIKE" for w in windows)
    print(
        f"realistic: {len(traffic.keys)} keys x {traffic.buckets} buckets, {len(windows)} labelled windows "
        f"({bursts} bursts, {len(windows) - bursts} outages); {sum(m <= 3 for m in medians)} keys with a "
        f"median count of 3 or less; the detector ran in {took:.1f} s",
        flush=True,
    )
    for name, r in results.items():
        print(
            f"  {name:8} score {r['score']:6.1f}  precision {r['precision']}  recall {r['recall']}  "
            f"reports/episode {r['reports_per_episode']}  median delay {r['median_delay_buckets']} buckets  "
            f"({r['reports']} reports, {r['false_reports']} outside every window, "
            f"{r['missed']} windows missed)",
            flush=True,
        )
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--keys", type=int, default=120)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    return {"realistic": run(RealisticScenario(seed=args.seed, keys=args.keys, days=args.days))}


if __name__ == "__main__":
    print(json.dumps(main()))
