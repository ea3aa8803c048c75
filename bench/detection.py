"""Detection quality: the dip detector against two baselines on labelled counts.

Run: ``.venv/bin/python bench/detection.py [--days 7] [--keys 120] [--services]``

Two scenarios, each a set of per-key counts per one-second bucket with labelled
anomaly windows:

- **realistic** (``services/injector/realistic.py``): heavy-tailed popularity,
  overdispersed counts, daily and weekly rhythm, slow level shifts, ordinary bursts,
  and labelled news-like bursts and outages (a compressed week);
- **scripted** (``services/injector/scenario.py``, what ``mw up`` runs): Poisson
  traffic with a daily rhythm and the scripted spikes and language-wide silences, the
  counts taken from the generator's records as the windower counts them; a window per
  detectable scripted event, from its start (less the generator's jitter: an event's
  records reach that far back) to 15 buckets after its end (the evidence the longest
  test sums; reports inside such a span of an event the generator marks
  undetectable, a silence of a query too small to tell, are left out of the score for
  every detector).

The project's detector runs over the counts through ``mwcore.testing.Harness`` (the
``DipDetector`` computation as the service runs it, with the scenario's day: a window
count per non-zero bucket, in bucket order, the watermark advanced bucket by bucket so
its timers fire); the rolling z-score and rolling median/MAD baselines run offline on
the same counts. Each is scored by ``services/dip_detector/evaluation.py`` (the
benchmark's normalised score: 0 for reporting nothing, 100 for perfect; precision,
recall, reports per episode, median delay in buckets): the detector's reports are its
OPEN anomalies, one per episode; the baselines' every bucket over their threshold.

``--services`` also runs the realistic scenario (``--services-days``, ``--services-keys``
of it) through the real services on the local stack (testbed/detection_services.py) and
checks that they report exactly what the harness reports on the same counts.

The last line is JSON: ``{"realistic": {"project": {...}, "zscore": {...}, "mad":
{...}}, "scripted": {...}}``, each with ``score``, ``precision``, ``recall``,
``reports_per_episode`` and ``median_delay_buckets``; with ``--services``, also
``"services": {"same_as_harness": ..., ...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # services.*, testbed.*

from services.dip_detector.evaluation import Report, Window, mad_reports, score, zscore_reports
from services.injector.realistic import RealisticScenario, RealisticTraffic
from services.injector.scenario import Scenario, Traffic
from testbed.detection import START_MS, Counts, harness_anomalies

AFTER_MS = 15_000  # a scripted window goes on this long after its event: the longest test's sum (16 buckets)


def opened(anomalies: list[dict[str, Any]]) -> list[Report]:
    return [
        Report(str(a["query"]), int(a["detected_bucket"]), str(a["kind"]))
        for a in anomalies
        if a["phase"] == "OPEN"
    ]


def compare(
    name: str,
    counts: Counts,
    windows: list[Window],
    project: list[Report],
    ignore: list[Window],
    buckets: int,
) -> dict[str, Any]:
    def kept(reports: list[Report]) -> list[Report]:
        return [
            r for r in reports if not any(w.key == r.key and w.start <= r.bucket <= w.end for w in ignore)
        ]

    end = START_MS + (buckets - 1) * 1000
    results = {
        "project": score(windows, kept(project)),
        "zscore": score(windows, kept(zscore_reports(counts, START_MS, end))),
        "mad": score(windows, kept(mad_reports(counts, START_MS, end))),
    }
    for detector, r in results.items():
        print(
            f"  {name:9} {detector:8} score {r['score']!s:>6}  precision {r['precision']}  "
            f"recall {r['recall']}  reports/episode {r['reports_per_episode']}  "
            f"median delay {r['median_delay_buckets']} buckets  ({r['reports']} reports, "
            f"{r['false_reports']} outside every window, {r['missed']} windows missed)",
            flush=True,
        )
    return results


def realistic(scenario: RealisticScenario) -> tuple[dict[str, Any], RealisticTraffic, list[dict[str, Any]]]:
    traffic = RealisticTraffic(scenario, START_MS)
    counts = traffic.counts()
    windows = [Window(a.key, a.start, a.end, a.kind) for a in traffic.anomalies()]
    t = time.perf_counter()
    anomalies = harness_anomalies(counts, traffic.langs, traffic.buckets, scenario.day_s)
    took = time.perf_counter() - t
    medians = sorted(traffic.median_counts().values())
    bursts = sum(w.kind == "SPIKE" for w in windows)
    print(
        f"realistic: {len(traffic.keys)} keys x {traffic.buckets} buckets, {len(windows)} labelled windows "
        f"({bursts} bursts, {len(windows) - bursts} outages); {sum(m <= 3 for m in medians)} keys with a "
        f"median count of 3 or less; the detector ran in {took:.1f} s through the harness",
        flush=True,
    )
    return compare("realistic", counts, windows, opened(anomalies), [], traffic.buckets), traffic, anomalies


def scripted_counts(traffic: Traffic, seconds: int) -> dict[str, dict[int, int]]:
    """Per query and bucket, the generator's records as the windower counts them (by
    timestamp; a record jittered before the scenario's start is left out)."""
    counts: Counter[tuple[str, int]] = Counter()
    for s in range(seconds):
        for ts, query, _lang, _user in traffic.second(s):
            if ts >= traffic.start_ms:
                counts[(query, ts // 1000 * 1000)] += 1
    out: dict[str, dict[int, int]] = {}
    for (query, bucket), n in counts.items():
        out.setdefault(query, {})[bucket] = n
    return out


def scripted(scenario: Scenario, seconds: int) -> dict[str, Any]:
    traffic = Traffic(scenario, START_MS)
    counts = scripted_counts(traffic, seconds)
    langs = {i.query: i.lang for i in traffic.infos}
    end = START_MS + seconds * 1000
    rows = [t for t in traffic.truth() if int(t["end"]) <= end]  # type: ignore[call-overload]
    before = scenario.jitter_ms  # an event's records reach this far back into the bucket before
    windows = [
        Window(str(t["query"]), int(t["start"]) - before, int(t["end"]) + AFTER_MS, str(t["kind"]))  # type: ignore[call-overload]
        for t in rows
        if t["detectable"]
    ]
    ignore = [
        Window(str(t["query"]), int(t["start"]) - before, int(t["end"]) + AFTER_MS)  # type: ignore[call-overload]
        for t in rows
        if not t["detectable"]
    ]
    t = time.perf_counter()
    anomalies = harness_anomalies(counts, langs, seconds, scenario.day_s)
    took = time.perf_counter() - t
    print(
        f"scripted: {len(traffic.infos)} queries x {seconds} buckets, {len(windows)} detectable scripted "
        f"windows ({sum(w.kind == 'SPIKE' for w in windows)} spikes); the detector ran in {took:.1f} s",
        flush=True,
    )
    return compare("scripted", counts, windows, opened(anomalies), ignore, seconds)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7, help="realistic: compressed days")
    parser.add_argument("--keys", type=int, default=120, help="realistic: keys")
    parser.add_argument("--seed", type=int, default=7, help="realistic: seed")
    parser.add_argument(
        "--scripted-seconds", type=int, default=1800, help="scripted: seconds (3 compressed days)"
    )
    parser.add_argument(
        "--services", action="store_true", help="also run the realistic scenario through the services"
    )
    parser.add_argument("--services-days", type=int, default=2)
    parser.add_argument("--services-keys", type=int, default=40)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    out["realistic"], _, _ = realistic(RealisticScenario(seed=args.seed, keys=args.keys, days=args.days))
    out["scripted"] = scripted(Scenario(), args.scripted_seconds)
    if args.services:
        from testbed.detection_services import through_services

        small = RealisticScenario(seed=args.seed, keys=args.services_keys, days=args.services_days)
        _, traffic, anomalies = realistic(small)
        out["services"] = through_services(traffic, START_MS, anomalies)
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
