"""``mw up`` for this repository: the Zeitgeist pipeline on the embedded local stack.

Starts a local broker and Redis, then every service under ``services/`` (each
directory with a ``__main__.py``) as its own process, with the traffic generator
writing query logs in real time for the injector. A live view shows records in,
windows out, each computation's watermark lag, and anomalies as they are found,
checked against the generator's script. ``--duration`` stops by itself and prints a
JSON summary as the last line.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from confluent_kafka import Consumer, TopicPartition

from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.tools.localproc import stop_processes
from mwcore.tools.localstack import LocalStack, free_port
from mwcore.tools.up import announce, withdraw
from mwcore.transport.topics import consumer_config, ensure_topics
from mwcore.transport.watermark_topic import WatermarkFeed
from services.injector.generator import generate
from services.injector.scenario import Scenario
from services.injector.truth import load_truth, score

ROOT = Path(__file__).resolve().parent.parent
FIRST = ("watermark_authority", "injector")  # started first; the rest in name order
PARTITIONS = 4


def service_names(root: Path = ROOT) -> list[str]:
    found = sorted(p.parent.name for p in (root / "services").glob("*/__main__.py"))
    return [n for n in FIRST if n in found] + [n for n in found if n not in FIRST]


class Watcher:
    """Counts records of the pipeline's streams and decodes anomalies as they come."""

    def __init__(self, bootstrap: str, registry: SchemaRegistry) -> None:
        self._c = Consumer(consumer_config(bootstrap, f"mw-up-{os.getpid()}"))
        topics = ("queries", "window_counts", "anomalies")
        self._c.assign([TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)])
        self._anomaly = AvroSerde(registry, "zeitgeist.Anomaly")
        self.counts: dict[str, int] = defaultdict(int)
        self.anomalies: list[dict[str, Any]] = []
        self.reported_at: dict[int, int] = {}
        self._seen: set[bytes] = set()

    def poll(self) -> None:
        while True:
            msgs = self._c.consume(10_000, 0)
            if not msgs:
                return
            for m in msgs:
                if m.error() is not None:
                    continue
                topic = m.topic() or ""
                self.counts[topic] += 1
                if topic == "anomalies":
                    rid = dict(m.headers() or []).get("mw-id", b"")
                    if isinstance(rid, bytes) and rid in self._seen:
                        continue  # re-sent after a crash
                    if isinstance(rid, bytes):
                        self._seen.add(rid)
                    self.reported_at[len(self.anomalies)] = time.time_ns() // 1_000_000
                    self.anomalies.append(self._anomaly.decode(m.value() or b""))

    def close(self) -> None:
        self._c.close()


def _lag(wm: int, now_ms: int) -> float | None:
    return None if wm <= MIN_WATERMARK or wm >= MAX_WATERMARK else (now_ms - wm) / 1000


def render(
    out: TextIO,
    elapsed: float,
    watcher: Watcher,
    feed: WatermarkFeed,
    truth: list[dict[str, Any]],
    alive: dict[str, bool],
) -> None:
    now_ms = time.time_ns() // 1_000_000
    lines = [
        f"mw up: Zeitgeist on the local stack, {elapsed:.0f} s (Ctrl-C or `mw down` stops it)",
        "",
        f"records in {watcher.counts['queries']:>10,}    windows out {watcher.counts['window_counts']:>9,}"
        f"    anomalies {len(watcher.anomalies):>4}",
        "",
        f"{'computation':<22}{'watermark lag':>15}{'p99 lag':>10}",
    ]
    for name, wm in sorted(feed.latest.items(), key=lambda kv: (kv[1].kind != "injector", kv[0])):
        lag, plag = _lag(wm.input, now_ms), _lag(wm.input_pct, now_ms)
        lines.append(
            f"{name:<22}{'held' if lag is None else f'{lag:.2f} s':>15}"
            f"{'' if plag is None else f'{plag:.2f} s':>10}"
        )
    lines += ["", "anomalies (latest last):"]
    scored = score(truth, watcher.anomalies)
    false = set(scored["false"])
    for a in watcher.anomalies[-8:]:
        mark = "not scripted" if (a["kind"], a["query"], a["start"]) in false else "scripted"
        when = time.strftime("%H:%M:%S", time.localtime(a["start"] / 1000))
        lines.append(
            f"  {when} {a['kind']:<5} {a['query']:<24} expected {a['expected']:>7.1f}"
            f"  observed {a['observed']:>7.1f}  {mark}"
        )
    lines += ["", "services: " + "  ".join(f"{n} {'up' if ok else 'DOWN'}" for n, ok in alive.items())]
    out.write("\x1b[2J\x1b[H" + "\n".join(lines) + "\n")
    out.flush()


def run(duration: float | None, rate: int) -> dict[str, Any]:
    schemas = ROOT / "schemas"
    registry = SchemaRegistry.from_directory(schemas)
    workdir = Path(tempfile.mkdtemp(prefix="mw-up-"))
    logs_dir = workdir / "querylogs"
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    interactive = sys.stderr.isatty()
    start_ms = (int(time.time()) + 2) * 1000
    seconds = int(duration) + 5 if duration else 86_400
    lags: dict[str, list[float]] = defaultdict(list)
    try:
        with LocalStack(workdir=workdir) as stack:
            streams = ("queries", "window_counts", "anomalies", "model_updates")
            ensure_topics(stack.bootstrap, dict.fromkeys(streams, PARTITIONS))
            announce(bootstrap=stack.bootstrap, redis_url=stack.redis_url, schemas_dir=str(schemas))
            env = {
                **os.environ,
                "MW_BOOTSTRAP": stack.bootstrap,
                "MW_REDIS_URL": stack.redis_url,
                "MW_SCHEMAS_DIR": str(schemas),
                "MW_INJECTOR_DIR": str(logs_dir),
                "MW_LOG_LEVEL": "warning",
                "PYTHONPATH": str(ROOT),
            }
            procs: dict[str, subprocess.Popen[bytes]] = {}
            metrics: dict[str, str] = {}
            for name in service_names():
                port = free_port()
                metrics[name] = f"http://127.0.0.1:{port}/metrics"
                own = {**env, "MW_METRICS_PORT": str(port), "MW_METRICS_HOST": "127.0.0.1"}
                with open(workdir / f"{name}.log", "wb") as log:
                    procs[name] = subprocess.Popen(
                        [sys.executable, "-m", f"services.{name}"], env=own, stdout=log, stderr=log, cwd=ROOT
                    )
            print(f"mw up: {stack.banner()}, logs in {workdir}", flush=True)
            print("mw up: metrics " + "  ".join(f"{n} {u}" for n, u in metrics.items()), flush=True)
            gen = threading.Thread(
                target=generate,
                args=(logs_dir, Scenario(rate=float(rate)), start_ms, seconds),
                kwargs={"stop": stop},
                daemon=True,
            )
            gen.start()
            watcher = Watcher(stack.bootstrap, registry)
            feed = WatermarkFeed(stack.bootstrap, "default")
            began = time.monotonic()
            last = 0.0
            try:
                while not stop.is_set() and (duration is None or time.monotonic() - began < duration):
                    watcher.poll()
                    feed.poll(0.2)
                    now = time.monotonic()
                    if now - last >= 1.0:
                        last = now
                        now_ms = time.time_ns() // 1_000_000
                        for name, wm in feed.latest.items():
                            lag = _lag(wm.input, now_ms)
                            if lag is not None:
                                lags[name].append(lag)
                        alive = {n: p.poll() is None for n, p in procs.items()}
                        truth = load_truth(logs_dir)
                        if interactive:
                            render(sys.stderr, now - began, watcher, feed, truth, alive)
                        elif int(now - began) % 10 == 0:
                            print(
                                f"{now - began:5.0f}s records {watcher.counts['queries']:,} windows "
                                f"{watcher.counts['window_counts']:,} anomalies {len(watcher.anomalies)}",
                                file=sys.stderr,
                                flush=True,
                            )
                stop.set()
                gen.join(5)
                watcher.poll()
                until = min((wm.input for n, wm in feed.latest.items() if n == "dip_detector"), default=0)
                truth = load_truth(logs_dir)
                quality = score(truth, watcher.anomalies, watcher.reported_at, until_ms=until)
                summary = {
                    "seconds": round(time.monotonic() - began, 1),
                    "services": list(procs),
                    "broker": stack.describe(),
                    "records_injected": watcher.counts["queries"],
                    "windows_produced": watcher.counts["window_counts"],
                    "anomalies_reported": len(watcher.anomalies),
                    "scripted_detectable": quality["scripted_detectable"],
                    "precision": quality["precision"],
                    "recall": quality["recall"],
                    "median_detection_delay_ms": quality["median_delay_ms"],
                    "median_delay_from_anomaly_start_ms": quality["median_delay_from_start_ms"],
                    "watermark_lag_ms": {
                        n: {"median": round(statistics.median(v) * 1000), "max": round(max(v) * 1000)}
                        for n, v in sorted(lags.items())
                    },
                    "metrics": metrics,
                    "logs": str(workdir),
                }
            finally:
                watcher.close()
                feed.close()
                stop_processes(procs.values(), 30)
    finally:
        stop.set()
        withdraw()
    return summary
