"""``mw up``: a whole pipeline on the embedded local stack, with a live view.

Starts a local broker and Redis, creates the pipeline's streams, starts each service
as its own process and lets the application feed the first stream; shows records per
stream, each computation's watermark lag and the application's own lines live;
``--duration`` (or Ctrl-C, SIGTERM, ``mw down``) stops it, and the last line of
stdout is a JSON summary. What runs comes from the project's ``[tool.mw.up]`` table
(``mwcore.tools.up.plan``); without one, the running-sum example.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.project import find_project
from mwcore.tools.stack.builder import local_stack
from mwcore.tools.stack.localproc import stop_processes
from mwcore.tools.stack.localstack import free_port
from mwcore.tools.up import view as up_view
from mwcore.tools.up.plan import Pipeline, Plan, example_plan, project_plan
from mwcore.transport.topics import ensure_topics
from mwcore.transport.watermark_topic import WatermarkFeed


def run(
    plan: Plan,
    workdir: Path,
    duration: float | None,
    rate: int,
    brokers: int = 1,
    redis_cluster: bool = False,
) -> dict[str, Any]:
    hooks = plan.pipeline
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        with local_stack(workdir, brokers=brokers, redis_cluster=redis_cluster) as stack:
            ensure_topics(stack.bootstrap, plan.streams)
            announce(bootstrap=stack.bootstrap, redis_url=stack.redis_url, schemas_dir=str(plan.schemas))
            env = {
                **os.environ,
                "MW_BOOTSTRAP": stack.bootstrap,
                "MW_REDIS_URL": stack.redis_url,
                "MW_SCHEMAS_DIR": str(plan.schemas),
                "MW_LOG_LEVEL": "warning",
                **hooks.environment(workdir),
            }
            if plan.root is not None:
                env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plan.root), env.get("PYTHONPATH")) if p)
            procs: dict[str, subprocess.Popen[bytes]] = {}
            try:
                metrics = _start_services(plan, env, workdir, procs)
                print(f"mw up: {stack.banner()}, logs in {workdir}", flush=True)
                print("mw up: metrics " + "  ".join(f"{n} {u}" for n, u in metrics.items()), flush=True)
                registry = SchemaRegistry.from_directory(plan.schemas)
                follower = up_view.StreamFollower(
                    stack.bootstrap, list(plan.streams), hooks.decoded_streams, registry, hooks.on_record
                )
                feed = WatermarkFeed(stack.bootstrap, "default")
                try:
                    hooks.start(env, stop, rate, duration)
                    began = time.monotonic()
                    lags = _follow(hooks, procs, follower, feed, stop, began, duration)
                    stop.set()
                    follower.poll()
                    counts = dict(follower.counts)
                    summary = {
                        "seconds": round(time.monotonic() - began, 1),
                        "services": list(procs),
                        "broker": stack.describe(),
                        **hooks.summary(counts, {n: wm.input for n, wm in feed.latest.items()}),
                        "watermark_lag_ms": lags.summary_ms(),
                        "metrics": metrics,
                        "logs": str(workdir),
                    }
                finally:
                    follower.close()
                    feed.close()
            finally:
                stop.set()
                stop_processes(procs.values(), 30)
    finally:
        withdraw()
    return summary


def _start_services(
    plan: Plan, env: Mapping[str, str], workdir: Path, procs: dict[str, subprocess.Popen[bytes]]
) -> dict[str, str]:
    """Start each service with a metrics port of its own (into ``procs``, so that what
    started is stopped even if a later one fails); their metrics URLs."""
    metrics: dict[str, str] = {}
    for svc in plan.services:
        port = free_port()
        metrics[svc.name] = f"http://127.0.0.1:{port}/metrics"
        own = {**env, "MW_METRICS_PORT": str(port), "MW_METRICS_HOST": "127.0.0.1"}
        with open(workdir / f"{svc.name}.log", "wb") as log:
            procs[svc.name] = subprocess.Popen(
                [sys.executable, *svc.args], env=own, stdout=log, stderr=log, cwd=plan.root
            )
    return metrics


def _follow(
    hooks: Pipeline,
    procs: Mapping[str, subprocess.Popen[bytes]],
    follower: up_view.StreamFollower,
    feed: WatermarkFeed,
    stop: threading.Event,
    began: float,
    duration: float | None,
) -> up_view.LagSamples:
    """Follow records and watermarks until stopped; redraw the view every second (a
    progress line every 10 s without a terminal)."""
    interactive = sys.stderr.isatty()
    lags = up_view.LagSamples()
    last, next_progress = 0.0, began + 10
    while not stop.is_set() and (duration is None or time.monotonic() - began < duration):
        follower.poll()
        feed.poll(0.2)
        now = time.monotonic()
        if now - last < 1.0:
            continue
        last = now
        lags.sample(feed.latest, time.time_ns() // 1_000_000)
        if interactive:
            codes = {n: p.poll() for n, p in procs.items()}
            up_view.render(
                sys.stderr, hooks.title, now - began, follower.counts, feed.latest, hooks.view_lines(), codes
            )
        elif now >= next_progress:
            next_progress += 10
            up_view.progress(sys.stderr, now - began, follower.counts)
    return lags


def main(duration: float | None, rate: int, brokers: int = 1, redis_cluster: bool = False) -> int:
    project = find_project()
    workdir = Path(tempfile.mkdtemp(prefix="mw-up-"))
    plan = project_plan(project) if project is not None and project.up is not None else example_plan(workdir)
    print(json.dumps(run(plan, workdir, duration, rate, brokers, redis_cluster)), flush=True)
    return 0


STATE_FILE = Path(tempfile.gettempdir()) / "mw-up.json"


def announce(**state: Any) -> None:
    """Tell other ``mw`` commands (``tail``, ``watermarks``, ``down``) where the running
    ``mw up`` is: its pid, broker, Redis and schemas."""
    STATE_FILE.write_text(json.dumps({"pid": os.getpid(), **state}))


def withdraw() -> None:
    STATE_FILE.unlink(missing_ok=True)


def running() -> dict[str, Any]:
    """What the running ``mw up`` announced; empty if none is running."""
    try:
        state: dict[str, Any] = json.loads(STATE_FILE.read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError):
        return {}
    return state


def down(timeout: float = 60) -> int:
    """Stop a running ``mw up`` (it stops its services and the local stack itself)."""
    state = running()
    if not state:
        print("mw down: no `mw up` is running", file=sys.stderr)
        return 1
    pid = int(state["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        withdraw()
        return 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 0
        time.sleep(0.2)
    print(f"mw down: `mw up` (pid {pid}) still running after {timeout}s", file=sys.stderr)
    return 1
