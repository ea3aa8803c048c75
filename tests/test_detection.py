"""The dip detector through the real services equals the detector through the harness
(``bench/detection.py --services`` on a smaller realistic scenario): the injector,
windower, dip detector and watermark authority as separate processes on the local
stack, fed the scenario's counts as query logs, report exactly the episodes
(``OPEN`` and ``CLOSE``, kind, start, detecting bucket) that ``mwcore.testing.Harness``
reports on the same counts."""

from __future__ import annotations

import pytest

from mwcore.tools.stack.localstack import LocalStack
from services.injector.realistic import RealisticScenario, RealisticTraffic
from testbed.detection import START_MS, harness_anomalies
from testbed.detection_services import through_services

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_services_report_what_the_harness_reports(stack: LocalStack, namespace: str) -> None:
    scenario = RealisticScenario(keys=24, days=2, rate=150.0, bursts_per_week=3.0, outages_per_week=4.0)
    traffic = RealisticTraffic(scenario, START_MS)
    assert traffic.anomalies(), "the scenario must hold labelled anomalies"
    harness = harness_anomalies(traffic.counts(), traffic.langs, traffic.buckets, scenario.day_s)
    opened = [a for a in harness if a["phase"] == "OPEN"]
    assert opened and any(a["phase"] == "CLOSE" for a in harness)
    result = through_services(traffic, START_MS, harness, stack=stack, namespace=namespace)
    assert result["anomalies"] > 0 and result["same_as_harness"], result
