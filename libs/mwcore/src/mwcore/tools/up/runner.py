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

from mwcore.process import exits
from mwcore.process.settings import StackSettings
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.project import find_project
from mwcore.tools.stack.builder import local_stack
from mwcore.tools.stack.localproc import stop_processes
from mwcore.tools.stack.localstack import free_port
from mwcore.tools.up import view as up_view
from mwcore.tools.up.plan import Pipeline, Plan, example_plan, project_plan
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
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
            registry_url = stack.schema_registry_url or ""
            announce(
                bootstrap=stack.bootstrap,
                redis_url=stack.redis_url,
                schemas_dir=str(plan.schemas),
                schema_registry_url=registry_url,
            )
            own = hooks.environment(workdir)
            env = {
                **os.environ,
                "MW_BOOTSTRAP": stack.bootstrap,
                "MW_REDIS_URL": stack.redis_url,
                "MW_SCHEMAS_DIR": str(plan.schemas),
                "MW_SCHEMA_REGISTRY_URL": registry_url,
                "MW_LOG_LEVEL": "warning",
                **own.get("*", {}),
            }
            if plan.root is not None:
                env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plan.root), env.get("PYTHONPATH")) if p)
            procs: dict[str, subprocess.Popen[bytes]] = {}
            try:
                metrics = _start_services(plan, env, own, workdir, procs)
                print(f"mw up: {stack.banner()}, logs in {workdir}", flush=True)  # the registry's URL too
                print("mw up: metrics " + "  ".join(f"{n} {u}" for n, u in metrics.items()), flush=True)
                registry = SchemaRegistry.from_directory(plan.schemas)
                if registry_url:  # streams framed "confluent" name their schemas by id
                    registry.use_ids(RegistryClient(RegistryAccess(registry_url)))
                follower = up_view.StreamFollower(
                    stack.bootstrap, list(plan.streams), hooks.decoded_streams, registry, hooks.on_record
                )
                feed = WatermarkFeed(stack.bootstrap, "default")
                exits = Exits(procs, workdir)
                try:
                    hooks.start(env, stop, rate, duration)
                    began = time.monotonic()
                    lags = _follow(hooks, procs, follower, feed, stop, began, duration, exits)
                    stop.set()
                    follower.poll()
                    counts = dict(follower.counts)
                    summary = {
                        "seconds": round(time.monotonic() - began, 1),
                        "services": list(procs),
                        "broker": stack.describe(),
                        "schema_registry": stack.describe_registry(),
                        **hooks.summary(counts, {n: wm.input for n, wm in feed.latest.items()}),
                        "watermark_lag_ms": lags.summary_ms(),
                        "exited": exits.summary(),
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


class Exits:
    """The services that stopped while ``mw up`` ran: each said on stderr the moment it is
    seen (with its log's last error line), and listed in the summary."""

    def __init__(self, procs: Mapping[str, subprocess.Popen[bytes]], workdir: Path) -> None:
        self.procs = procs
        self.workdir = workdir
        self.seen: dict[str, tuple[int, str | None]] = {}  # name -> (exit code, last error line)

    def check(self) -> None:
        for name, proc in self.procs.items():
            code = proc.poll()
            if code is None or name in self.seen:
                continue
            line = exits.last_error_in(self.workdir / f"{name}.log") if code else None  # 0: finished
            self.seen[name] = (code, line)
            how = "finished" if code == 0 else f"stopped: {exits.describe(code)}"
            print(
                f"mw up: {name} {how}" + (f": {line}" if code and line else ""), file=sys.stderr, flush=True
            )

    @property
    def failed(self) -> list[str]:
        """Services that stopped with an error (a one-shot job that finishes is fine)."""
        return [n for n, (code, _) in self.seen.items() if code != 0]

    def summary(self) -> list[dict[str, Any]]:
        return [
            {"service": n, "exit_code": code, "how": exits.describe(code), "last_error": line}
            for n, (code, line) in self.seen.items()
        ]


# How much nicer than ``mw up`` a batch job runs: it gets about a tenth of a core's share
# against a streaming service (the kernel's weights for nice 10 against 0: 110 to 1024),
# so a Spark job started beside the pipeline takes the cores the pipeline leaves rather
# than half of them. Added to ``mw up``'s own niceness (at most 19), never lowering it.
BATCH_NICENESS = 10


def _lower_priority() -> None:  # in the child, before exec: only a system call
    os.nice(BATCH_NICENESS)


def _start_services(
    plan: Plan,
    env: Mapping[str, str],
    own: Mapping[str, Mapping[str, str]],
    workdir: Path,
    procs: dict[str, subprocess.Popen[bytes]],
) -> dict[str, str]:
    """Start each service with ``env``, its ``own`` settings and a metrics port of its own
    (into ``procs``, so that what started is stopped even if a later one fails), batch
    jobs at a lower CPU priority; their metrics URLs."""
    metrics: dict[str, str] = {}
    for svc in plan.services:
        port = free_port()
        metrics[svc.name] = f"http://127.0.0.1:{port}/metrics"
        svc_env = {
            **env,
            **own.get(svc.name, {}),
            "MW_METRICS_PORT": str(port),
            "MW_METRICS_HOST": "127.0.0.1",
        }
        with open(workdir / f"{svc.name}.log", "wb") as log:
            procs[svc.name] = subprocess.Popen(
                [sys.executable, *svc.args],
                env=svc_env,
                stdout=log,
                stderr=log,
                cwd=plan.root,
                preexec_fn=_lower_priority if svc.batch else None,
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
    exits: Exits,
) -> up_view.LagSamples:
    """Follow records and watermarks until stopped; redraw the view every second (a
    progress line every 10 s without a terminal); say at once when a service stops."""
    interactive = sys.stderr.isatty()
    lags = up_view.LagSamples()
    last, next_progress = 0.0, began + 10
    while not stop.is_set() and (duration is None or time.monotonic() - began < duration):
        follower.poll()
        feed.poll(0.2)
        exits.check()
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
    summary = run(plan, workdir, duration, rate, brokers, redis_cluster)
    print(json.dumps(summary), flush=True)
    # a service that stopped with an error makes the run a failure (one that finished is fine)
    return 1 if any(e["exit_code"] != 0 for e in summary["exited"]) else 0


def state_file() -> Path:
    """Where a running ``mw up`` says where it is: in the user's own runtime directory
    (``XDG_RUNTIME_DIR``), else under ``~/.cache/mwcore``; never a shared place such as
    /tmp, where another user could plant one."""
    env = StackSettings.load()
    base = env.xdg_runtime_dir or (env.xdg_cache_home or Path.home() / ".cache") / "mwcore"
    return base / "mw-up.json"


def announce(**state: Any) -> None:
    """Tell other ``mw`` commands (``tail``, ``watermarks``, ``down``) where the running
    ``mw up`` is: its pid, broker, Redis and schemas (a file only its user can read)."""
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": os.getpid(), **state}, f)
    os.replace(tmp, path)


def withdraw() -> None:
    state_file().unlink(missing_ok=True)


def running() -> dict[str, Any]:
    """What the running ``mw up`` announced; empty if none is running, or if the file
    is not one this user's ``mw up`` wrote (owned by another user, readable by others,
    a link, or naming a process that is not ``mw up``): then it says so on stderr."""
    path = state_file()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            print(f"mw: ignoring {path}: not private to this user (owner or mode)", file=sys.stderr)
            return {}
        try:
            state: dict[str, Any] = json.loads(f.read(65_536))
            pid = int(state["pid"])
        except (ValueError, KeyError, TypeError, RecursionError):
            return {}
    if not isinstance(state, dict) or not _is_mw_up(pid):
        return {}
    return state


def _is_mw_up(pid: int) -> bool:
    """Whether ``pid`` is a live ``mw up`` of this user."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        uid = int(Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return False
    runs_mw = any(Path(a.decode(errors="replace")).name in ("mw", "mwcore") for a in args)
    return uid == os.getuid() and runs_mw and b"up" in args


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
