"""The realistic scenario through the real services (``bench/detection.py --services``).

The scenario's counts become query logs (one record per count, one file per second,
as the generator writes them); the local stack (Kafka and Redis, as ``mw up`` starts
them) runs the watermark authority, the injector, the windower and the dip detector
as separate processes, with the scenario's day (``MW_DETECTOR_DAY_S``). Once the
detector's watermark has passed the last bucket, its ``anomalies`` stream is read
(committed records, a record re-sent after a crash counted once) and compared with
what the harness reported on the same counts: the same episodes, OPEN and CLOSE, with
the same start, kind and detecting bucket.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localproc import stop_processes
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics, topic_name
from mwcore.transport.watermark_topic import WatermarkFeed
from services.injector.logs import file_name, record_line, write_atomically
from services.injector.realistic import RealisticTraffic
from services.up import PARTITIONS
from testbed import wire
from testbed.services import service_env, start_services
from testbed.topics import read_topic

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("watermark_authority", "injector", "windower", "dip_detector")
STREAMS = ("queries", "window_counts", "anomalies", "model_updates")
FIELDS = ("query", "phase", "kind", "start", "detected_bucket")


def write_logs(directory: Path, traffic: RealisticTraffic) -> int:
    """The counts as query logs: each count's records at random milliseconds of its
    bucket (no jitter: every record is in its file's second)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / "scenario.json", [json.dumps({"jitter_ms": 0})])
    rng = np.random.default_rng(1)
    by_bucket: dict[int, list[tuple[str, int]]] = {}
    for key, series in traffic.counts().items():
        for bucket, n in series.items():
            by_bucket.setdefault(bucket, []).append((key, n))
    written = 0
    for b in range(traffic.buckets):
        bucket = traffic.start_ms + b * 1000
        lines = []
        for key, n in by_bucket.get(bucket, ()):
            for off in rng.integers(0, 1000, n).tolist():
                lines.append(record_line(bucket + off, key, traffic.langs[key], int(rng.integers(1_000_000))))
        write_atomically(directory / file_name(bucket), lines)
        written += len(lines)
    return written


def through_services(
    traffic: RealisticTraffic,
    start_ms: int,
    harness: list[dict[str, Any]],
    stack: LocalStack | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """Run the services over ``traffic`` on ``stack`` (None: a local stack of its own,
    stopped afterwards) and compare their anomalies with ``harness``'s."""
    workdir = Path(tempfile.mkdtemp(prefix="mw-detection-"))
    with contextlib.ExitStack() as resources:
        if stack is None:
            stack = resources.enter_context(LocalStack(workdir=workdir))
        return _run(stack, namespace, workdir, traffic, start_ms, harness)


def _run(
    stack: LocalStack,
    namespace: str,
    workdir: Path,
    traffic: RealisticTraffic,
    start_ms: int,
    harness: list[dict[str, Any]],
) -> dict[str, Any]:
    logs_dir = workdir / "querylogs"
    records = write_logs(logs_dir, traffic)
    last = start_ms + traffic.buckets * 1000 - 1
    began = time.monotonic()
    ensure_topics(stack.bootstrap, {topic_name(namespace, s): PARTITIONS for s in STREAMS})
    env = service_env(stack, namespace, logs_dir, MW_DETECTOR_DAY_S=str(traffic.scenario.day_s))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    feed = WatermarkFeed(stack.bootstrap, namespace)
    try:
        start_services(SERVICES, env, workdir, procs)
        deadline = time.monotonic() + 900
        while True:
            feed.poll(0.5)
            wm = feed.latest.get("dip_detector")
            # the injector holds its last second open until more comes: the detector's
            # input watermark stops just short of the end
            if wm is not None and wm.input >= last - 1000:
                break
            dead = [n for n, p in procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the services did not finish (dead: {dead}); logs in {workdir}")
        took = time.monotonic() - began
        registry = SchemaRegistry.from_directory(ROOT / "schemas")
        serde = wire.serde(stack, registry, topic_name(namespace, "anomalies"), "zeitgeist.Anomaly")
        seen: set[bytes] = set()
        services = []
        for m in read_topic(stack.bootstrap, topic_name(namespace, "anomalies")):
            if m.id not in seen:
                seen.add(m.id)
                services.append(serde.decode(m.value))
    finally:
        feed.close()
        stop_processes(procs.values(), 30)
    horizon = last - 1999  # the buckets both runs have closed
    ours = sorted(tuple(a[f] for f in FIELDS) for a in services if a["detected_bucket"] <= horizon)
    theirs = sorted(tuple(a[f] for f in FIELDS) for a in harness if a["detected_bucket"] <= horizon)
    result = {
        "keys": len(traffic.keys),
        "buckets": traffic.buckets,
        "records": records,
        "seconds": round(took, 1),
        "anomalies": len(ours),
        "harness_anomalies": len(theirs),
        "same_as_harness": ours == theirs,
    }
    print(f"services: {json.dumps(result)}", flush=True)
    return result
