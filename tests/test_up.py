"""``mw up --duration``: the README's first command runs the whole Zeitgeist pipeline in
real time on its own local stack, and its last line is the JSON summary. On the
default scenario (a spike at 40 s, a language going silent at 80 s, a spike at
120 s) it must find every detectable scripted anomaly, report nothing else, and
report within 3 s of the end of the bucket that decides it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent


def test_mw_up_runs_the_pipeline_and_detects_the_scripted_anomalies() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mwcore", "up", "--duration", "140"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("MW_")},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"mw up summary: {json.dumps(summary)}")
    from mwcore.tools.kafka_broker import KAFKA_VERSION

    assert summary["broker"] == {"product": "Apache Kafka", "version": KAFKA_VERSION}  # as it logged
    assert set(summary["services"]) >= {"watermark_authority", "injector", "windower", "dip_detector"}
    assert summary["records_injected"] > 100_000 and summary["windows_produced"] > 10_000
    assert summary["scripted_detectable"] >= 5  # two spikes and the detectable queries of a dip
    assert summary["recall"] >= 0.95 and summary["precision"] >= 0.95, summary
    assert summary["median_detection_delay_ms"] < 3000, summary
    assert summary["watermark_lag_ms"]["dip_detector"]["median"] < 5000
