"""The dip detector over labelled counts, in event time, through the test harness: what
``bench/detection.py`` scores and ``tests/test_detection.py`` compares the real services
with (``detection_services.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mwcore.testing import Harness
from services.dip_detector.computation import DipDetector
from services.dip_detector.settings import DetectorSettings

START_MS = 1_700_006_400_000  # a midnight (UTC): a day of the detector starts with the scenario's
Counts = Mapping[str, Mapping[int, int]]  # key -> bucket start (ms) -> count, zeros left out


def harness_anomalies(
    counts: Counts, langs: Mapping[str, str], buckets: int, day_s: int
) -> list[dict[str, Any]]:
    """The detector's anomalies over the counts, through the harness, in event time."""
    h = Harness(DipDetector(DetectorSettings(detector_day_s=day_s)))
    by_bucket: dict[int, list[tuple[str, int]]] = {}
    for key, series in counts.items():
        for bucket, n in series.items():
            by_bucket.setdefault(bucket, []).append((key, n))
    for b in range(buckets):
        bucket = START_MS + b * 1000
        for key, n in by_bucket.get(bucket, ()):
            value = {"query": key, "lang": langs[key], "bucket_start": bucket, "count": n}
            h.send("window_counts", value, bucket + 999, key=key, decoded=True)
        h.advance_watermark(bucket + 999)
    return [dict(a) for a in h.values("anomalies")]
