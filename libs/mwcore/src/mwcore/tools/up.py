"""``mw up``: a whole pipeline on the embedded local stack, with a live view.

Starts a local broker and Redis, every computation of the pipeline as its own worker
process, and a generator feeding the first stream; shows records in and out, commits
and dead letters live; ``--duration`` stops it by itself and prints a JSON summary as
the last line. In a project with ``services/up.py`` (this repository: the Zeitgeist
pipeline) that module runs instead; elsewhere the pipeline is the running-sum example.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import redis

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.localstack import LocalStack
from mwcore.transport.topics import end_offsets, ensure_topics, partition_counts
from mwcore.transport.writer import SourceWriter


@dataclass(frozen=True)
class PipelineSpec:
    computations: tuple[str, ...]  # module:Class, one worker process each
    source_stream: str
    source_schema: str
    output_streams: tuple[str, ...]
    partitions: int = 4


EXAMPLE = PipelineSpec(
    computations=("mwcore.examples.running_sum:RunningSum", "mwcore.examples.running_sum:RunningSum"),
    source_stream="numbers",
    source_schema="mw.examples.Number",
    output_streams=("sums", "totals"),
)


@dataclass
class Status:
    injected: int = 0
    committed: int = 0
    outputs: dict[str, int] = field(default_factory=dict)
    workers_alive: int = 0


def find_schemas_dir() -> Path:
    env = os.environ.get("MW_SCHEMAS_DIR")
    if env:
        return Path(env)
    for base in (Path.cwd(), *Path.cwd().parents):
        if (base / "schemas").is_dir():
            return base / "schemas"
    raise SystemExit("mw up: no schemas/ directory found; run it from the repository or set MW_SCHEMAS_DIR")


def _end_offsets(bootstrap: str, topic: str) -> int:
    """Records in a topic: the sum of its partitions' end offsets."""
    n = partition_counts(bootstrap, [topic]).get(topic, 0)
    return sum(end_offsets(bootstrap, {topic: n}).values()) if n else 0


def run(duration: float | None, rate: int, spec: PipelineSpec = EXAMPLE) -> dict[str, object]:
    schemas = find_schemas_dir()
    registry = SchemaRegistry.from_directory(schemas)
    workdir = Path(tempfile.mkdtemp(prefix="mw-up-"))
    stopping = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    with LocalStack(workdir=workdir) as stack:
        ensure_topics(stack.bootstrap, {spec.source_stream: spec.partitions})
        announce(bootstrap=stack.bootstrap, redis_url=stack.redis_url, schemas_dir=str(schemas))
        env = {
            **os.environ,
            "MW_BOOTSTRAP": stack.bootstrap,
            "MW_REDIS_URL": stack.redis_url,
            "MW_SCHEMAS_DIR": str(schemas),
            "MW_LOG_LEVEL": "warning",
        }
        procs = []
        for i, comp in enumerate(spec.computations):
            log = open(workdir / f"worker-{i}.log", "wb")  # noqa: SIM115
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "mwcore", "run", comp], env=env, stdout=log, stderr=log
                )
            )
        writer = SourceWriter(stack.bootstrap, registry, spec.source_stream, spec.source_schema)
        r = redis.Redis.from_url(stack.redis_url)
        rng = random.Random()
        status = Status()
        start = time.monotonic()
        last_view = 0.0
        print(f"mw up: {stack.banner()}, logs in {workdir}", flush=True)
        broker = stack.describe()
        try:
            while not stopping and (duration is None or time.monotonic() - start < duration):
                target = int((time.monotonic() - start) * rate)
                while status.injected < target:
                    key = f"key-{rng.randrange(100)}"
                    writer.write(key, {"n": rng.randint(1, 10)}, int(time.time() * 1000))
                    status.injected += 1
                writer.producer.poll(0)
                now = time.monotonic()
                if now - last_view >= 1.0:
                    last_view = now
                    status.workers_alive = sum(p.poll() is None for p in procs)
                    status.committed = _committed_records(r, spec)
                    view = (
                        f"\r{now - start:6.0f}s  injected {status.injected:>9,}  "
                        f"committed {status.committed:>9,}  workers {status.workers_alive}/{len(procs)}"
                    )
                    print(view, end="", file=sys.stderr, flush=True)
                time.sleep(0.01)
            writer.flush()
            # Let the workers catch up with what was injected before summarising.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _committed_records(r, spec) < status.injected:
                time.sleep(0.2)
            status.committed = _committed_records(r, spec)
            for stream in spec.output_streams:
                status.outputs[stream] = _end_offsets(stack.bootstrap, stream)
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
        print(file=sys.stderr)
    return {
        "pipeline": [c.split(":")[1] for c in spec.computations],
        "broker": broker,
        "seconds": round(time.monotonic() - start, 1),
        "records_injected": status.injected,
        "records_committed": status.committed,
        "outputs": status.outputs,
    }


def _committed_records(r: redis.Redis, spec: PipelineSpec) -> int:
    total = 0
    for key in r.scan_iter(match="mw:{default/*}:pos", count=1000):
        for pos_field, value in r.hgetall(key).items():
            name = pos_field.decode() if isinstance(pos_field, bytes) else str(pos_field)
            if name.startswith(f"{spec.source_stream}:"):
                total += int(value)
    return total


def _project_pipeline() -> object | None:
    """The project's own ``services.up`` (this repository: Zeitgeist), if there is one
    above the current directory; else None (the running-sum example runs)."""
    import importlib

    for base in (Path.cwd(), *Path.cwd().parents):
        if (base / "services" / "up.py").is_file():
            if str(base) not in sys.path:
                sys.path.insert(0, str(base))
            return importlib.import_module("services.up")
    return None


def main(duration: float | None, rate: int) -> int:
    pipeline = _project_pipeline()
    summary = run(duration, rate) if pipeline is None else pipeline.run(duration, rate)  # type: ignore[attr-defined]
    print(json.dumps(summary))
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
