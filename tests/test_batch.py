"""The Zeitgeist windower and dip detector in batch over the archive give exactly what
the streaming services produced from the same input.

The services run as separate processes on a scenario written 10x faster than real
time; then `mw batch` has Spark read the archived `queries` (format "mw") and run the
windower's and the dip detector's classes, unchanged, over it (keys grouped, records
in timestamp order, timers in timestamp order, the watermark at the end of the data
at the end), writing each output stream as Parquet.
Up to the horizon the streaming run has closed, the window counts and the anomalies
are the same.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.cli import main
from mwcore.tools.stack.localstack import LocalStack
from services.injector.generator import generate
from services.injector.scenario import Scenario
from testbed.procs import wait_until
from tests.conftest import ROOT
from tests.support.watermarks import Published
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
    spark: Any,
    stack: LocalStack,
    registry: SchemaRegistry,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    horizon = stream_run(stack, namespace, tmp_path)
    out = tmp_path / "batch"
    # `mw batch`: the archived queries through the windower's and the detector's
    # classes in Spark, one Parquet dataset per output stream.
    argv = ["--out", str(out), "--bootstrap", stack.bootstrap, "--namespace", namespace]
    assert main(["batch", *argv, "--schemas", str(ROOT / "schemas")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    batch_counts = [
        (r["query"], r["bucket_start"], r["count"])
        for r in spark.read.parquet(str(out / "window_counts")).collect()
    ]
    assert summary["records"]["window_counts"] == len(batch_counts)
    stream_counts = [
        (c["query"], c["bucket_start"], c["count"])
        for c in decoded(stack, registry, namespace, "window_counts", "zeitgeist.WindowCount")
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
        tuple(r[k] for k in key)
        for r in spark.read.parquet(str(out / "anomalies")).collect()
        if r["detected_bucket"] <= horizon
    }
    assert streamed and batched == streamed
