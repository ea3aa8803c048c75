"""The Zeitgeist windower and dip detector in batch over the archive give exactly what
the streaming services produced from the same input.

The services run as separate processes on a scenario written 10x faster than real
time; then Spark reads the archived `queries` (format "mw") and runs the windower's
and the dip detector's classes, unchanged, over it (keys grouped, records in
timestamp order, timers in timestamp order, the watermark at infinity at the end).
Up to the horizon the streaming run has closed, the window counts and the anomalies
are the same.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mwcore.localstack import LocalStack
from mwcore.serde import SchemaRegistry
from mwcore.spark.batch import decoded as batch_decoded
from mwcore.spark.batch import run_computation
from services.injector.generator import generate
from services.injector.scenario import Scenario
from tests.conftest import ROOT
from tests.support.procs import wait_until
from tests.test_watermarks import Published
from tests.test_zeitgeist import decoded, services

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.slow]

SECONDS, SPEED, START_MS = 70, 10.0, 1_700_000_000_000
SCENARIO = Scenario(seed=4, rate=1000, queries=150)


def stream_run(stack: LocalStack, namespace: str, tmp_path: Path) -> int:
    logs_dir, log_dir = tmp_path / "querylogs", tmp_path / "logs"
    log_dir.mkdir()
    procs = services(stack, namespace, log_dir, logs_dir)
    pub = Published(stack.bootstrap, namespace)
    promise = START_MS + SECONDS * 1000 - SCENARIO.jitter_ms
    try:
        for p in procs.values():
            p.start()
        for name in ("windower", "dip_detector"):
            wait_until(lambda n=name: procs[n].ready, 60, what=f"{name} to join")  # type: ignore[misc]
        generate(logs_dir, SCENARIO, START_MS, SECONDS, speed=SPEED)
        wait_until(lambda: pub.output("dip_detector") >= promise, 240, 0.5, "the dip detector to finish")
    finally:
        for p in procs.values():
            p.terminate()
        pub.close()
    return promise - 1000  # the last bucket start both stages have closed


def test_batch_windower_and_detector_equal_the_streaming_services(
    spark: Any, stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    horizon = stream_run(stack, namespace, tmp_path)
    promise = horizon + 1000
    archive = (
        spark.read.format("mw")
        .option("bootstrap", stack.bootstrap)
        .option("namespace", namespace)
        .option("schemasDir", str(ROOT / "schemas"))
        .option("streams", "queries")
        .load()
    )
    end = promise + 1000  # the last file's end: the injector's final promise is below it
    counts = run_computation(archive, "services.windower.computation:Windower", registry, end).cache()
    anomalies = run_computation(counts, "services.dip_detector.computation:DipDetector", registry, end)

    def window(c: dict[str, Any]) -> tuple[str, int, int]:
        return (c["query"], c["bucket_start"], c["count"])

    batch_counts = [
        window(c) for c in batch_decoded(counts, "window_counts", "zeitgeist.WindowCount", registry)
    ]
    stream_counts = [
        window(c) for c in decoded(stack, registry, namespace, "window_counts", "zeitgeist.WindowCount")
    ]
    assert len(set(batch_counts)) == len(batch_counts)  # no window twice
    want = Counter(c for c in stream_counts if c[1] <= horizon)
    got = Counter(c for c in batch_counts if c[1] <= horizon)
    assert len(want) > 5_000 and got == want

    key = ("query", "kind", "start", "detected_bucket", "expected", "observed")
    streamed = {
        tuple(a[k] for k in key)
        for a in decoded(stack, registry, namespace, "anomalies", "zeitgeist.Anomaly")
        if a["detected_bucket"] <= horizon
    }
    batched = {
        tuple(a[k] for k in key)
        for a in batch_decoded(anomalies, "anomalies", "zeitgeist.Anomaly", registry)
        if a["detected_bucket"] <= horizon
    }
    assert streamed and batched == streamed
