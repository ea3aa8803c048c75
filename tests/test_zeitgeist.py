"""The Zeitgeist pipeline end to end, every service its own process on the local stack.

The generator writes a scripted scenario (skewed queries, a daily rhythm, jittered
timestamps, spikes and a language going silent) ten times faster than real time; the
injector, windower, dip detector and watermark authority run as in production.
Checked: every window count equals an offline recount of the logs; the anomalies are
exactly what the detector's rules give offline on those counts, and every detectable
scripted spike and dip is among them. Once more with the windower and the dip
detector SIGKILLed and restarted mid-run: identical results.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import topic_name
from services.dip_detector.offline import detect
from services.injector.generator import generate
from services.injector.scenario import Scenario, Traffic
from services.injector.truth import load_truth, recount, score
from testbed import wire
from testbed.procs import Background, WorkerProc, joined, wait_until, worker_env
from tests.support.watermarks import Published

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SECONDS = 150
SPEED = 10.0
START_MS = 1_700_000_000_000
SCENARIO = Scenario(seed=11, rate=2000, queries=300)


def services(
    stack: LocalStack, namespace: str, log_dir: Path, logs_dir: Path, **extra: str
) -> dict[str, WorkerProc]:
    env = worker_env(
        stack,
        namespace,
        MW_WATERMARK="authority",
        MW_INJECTOR_DIR=str(logs_dir),
        MW_INJECTOR_POLL_MS="20",
        **extra,
    )
    return {
        "authority": WorkerProc("authority", env, log_dir, "authority", command=("authority",)),
        "injector": WorkerProc(
            "injector", env, log_dir, "injector", command=("run",), module="services.injector"
        ),
        "windower": WorkerProc("windower", env, log_dir, "windower", command=(), module="services.windower"),
        "dip_detector": WorkerProc(
            "dip_detector", env, log_dir, "dip_detector", command=(), module="services.dip_detector"
        ),
    }


def decoded(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, stream: str, schema: str
) -> list[Any]:
    from testbed.topics import read_topic

    serde = wire.serde(stack, registry, topic_name(namespace, stream), schema)
    seen: set[bytes] = set()
    out = []
    for m in read_topic(stack.bootstrap, topic_name(namespace, stream)):
        if m.id not in seen:  # a production re-sent after a crash has the same id
            seen.add(m.id)
            out.append(serde.decode(m.value))
    return out


def run(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, kill: bool
) -> dict[str, Any]:
    logs_dir, log_dir = tmp_path / "querylogs", tmp_path / "logs"
    log_dir.mkdir()
    # the detector's day is the scenario's compressed one, as `mw up` sets it
    procs = services(stack, namespace, log_dir, logs_dir, MW_DETECTOR_DAY_S=str(SCENARIO.day_s))
    pub = Published(stack.bootstrap, namespace)
    promise = START_MS + SECONDS * 1000 - SCENARIO.jitter_ms  # the injector's last watermark
    try:
        for p in procs.values():
            p.start()
        for name in ("windower", "dip_detector"):
            wait_until(lambda n=name: procs[n].ready, 60, what=f"{name} to join")  # type: ignore[misc]
        gen = Background(generate, logs_dir, SCENARIO, START_MS, SECONDS, speed=SPEED)
        gen.start()
        if kill:
            for name, at in (("windower", 0.35), ("dip_detector", 0.6)):
                wait_until(
                    lambda at=at: pub.input("dip_detector") >= START_MS + int(at * SECONDS * 1000),  # type: ignore[misc]
                    120,
                    0.2,
                    f"{at:.0%} of the run",
                )
                procs[name].kill()
                procs[name].start()
        joined(gen, SECONDS / SPEED + 60, "the log generator")
        wait_until(lambda: pub.output("dip_detector") >= promise, 240, 0.5, "the dip detector to finish")
        pub.assert_monotonic()
    finally:
        for p in procs.values():
            p.terminate()
        pub.close()
    horizon = promise - 1000  # the last bucket start both stages have closed
    counts = decoded(stack, registry, namespace, "window_counts", "zeitgeist.WindowCount")
    anomalies = decoded(stack, registry, namespace, "anomalies", "zeitgeist.Anomaly")
    return {
        "counts": counts,
        "anomalies": anomalies,
        "horizon": horizon,
        "logs": logs_dir,
        "kills": sum(p.kills for p in procs.values()),
    }


def check(result: dict[str, Any]) -> dict[str, Any]:
    horizon = result["horizon"]
    truth_counts = recount(result["logs"], SCENARIO.jitter_ms)
    want = Counter({k: n for k, n in truth_counts.items() if k[1] <= horizon})
    got = Counter({(c["query"], c["bucket_start"]): c["count"] for c in result["counts"]})
    assert len(got) == len(result["counts"]), "a window was emitted twice"
    assert got == want
    langs = {info.query: info.lang for info in Traffic(SCENARIO, START_MS).infos}
    key = ("query", "kind", "start", "detected_bucket")
    expected = {tuple(a[k] for k in key) for a in detect(want, langs, horizon, day=SCENARIO.day_s)}
    assert {tuple(a[k] for k in key) for a in result["anomalies"]} == expected
    quality = score(load_truth(result["logs"]), result["anomalies"], until_ms=horizon)
    assert quality["recall"] == 1.0, quality
    assert quality["precision"] >= 0.95, quality
    return quality


def test_zeitgeist_counts_and_anomalies_are_exact(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    quality = check(run(stack, registry, namespace, tmp_path, kill=False))
    print(f"detection quality: {quality}")


def test_zeitgeist_results_are_identical_with_a_windower_and_a_detector_killed(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    result = run(stack, registry, namespace, tmp_path, kill=True)
    assert result["kills"] == 2
    check(result)
