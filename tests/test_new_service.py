"""A service made with `mw new-service`, added to the running pipeline.

In a copy of the project, `mw new-service trends --input window_counts` writes the
service where the project's `[tool.mw]` table says; its own unit test (in memory: its
test on containers is run by tests/test_containers.py, with an engine) passes and the
compose file (now with its entry) still passes every check. While the authority,
injector and windower run (on a scenario the generator writes in real time, sped up),
the new service is started beside them: nothing else restarts, it reads
`window_counts` from the beginning, the authority picks it up (its watermark appears
in `mw watermarks`), and its per-window counts equal a count of the windower's output
for every window its watermark has closed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mwcore.api.clock import MIN_WATERMARK
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import topic_name
from services.injector.generator import generate
from services.injector.scenario import Scenario
from testbed import wire
from testbed.procs import Background, WorkerProc, joined, wait_until
from testbed.topics import read_topic
from tests.conftest import ROOT
from tests.support.watermarks import Published
from tests.test_zeitgeist import services

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SECONDS, SPEED, START_MS = 60, 2.0, 1_700_000_000_000
WINDOW_MS = 10_000


def copy_project(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in ("services", "schemas"):
        shutil.copytree(ROOT / d, dest / d, ignore=ignore)
    for f in ("docker-compose.yml", "Dockerfile", "pyproject.toml"):  # [tool.mw]: where services go
        shutil.copy(ROOT / f, dest / f)
    return dest


def in_project(root: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{ROOT}"}
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_a_generated_service_joins_the_running_pipeline(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    project = copy_project(tmp_path / "project")
    made = in_project(
        project, sys.executable, "-m", "mwcore", "new-service", "trends", "--input", "window_counts"
    )
    assert made.returncode == 0, made.stderr
    assert (project / "services/trends/computation.py").is_file()
    # its test in memory (its test on containers needs a Docker engine: tests/test_containers.py)
    containers_test = "services/trends/tests/test_on_containers.py"
    tested = in_project(
        project, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "services/trends",
        "--ignore", containers_test,
    )  # fmt: skip
    assert tested.returncode == 0 and "1 passed" in tested.stdout, tested.stdout + tested.stderr
    checked = in_project(
        project,
        sys.executable,
        "-c",
        "import sys; from pathlib import Path; from tests.support.compose import load, problems; "
        f"p = problems(Path('.').resolve(), load(Path('docker-compose.yml')), Path({str(tmp_path)!r})); "
        "print(p); sys.exit(1 if p else 0)",
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    logs_dir, log_dir = tmp_path / "querylogs", tmp_path / "logs"
    log_dir.mkdir()
    procs = services(stack, namespace, log_dir, logs_dir)
    procs.pop("dip_detector")
    env = {**procs["windower"].env, "MW_SCHEMAS_DIR": str(project / "schemas")}
    trends = WorkerProc("trends", env, log_dir, "trends", command=(), module="services.trends", cwd=project)
    pub = Published(stack.bootstrap, namespace)
    promise = START_MS + SECONDS * 1000 - Scenario().jitter_ms
    try:
        for p in procs.values():
            p.start()
        wait_until(lambda: procs["windower"].ready, 60, what="the windower to join")
        gen = Background(
            generate, logs_dir, Scenario(seed=3, rate=500, queries=100), START_MS, SECONDS, speed=SPEED
        )
        gen.start()
        wait_until(lambda: pub.output("windower") > START_MS + 15_000, 120, 0.2, "the pipeline to run")
        trends.start()  # while the pipeline runs
        wait_until(lambda: pub.input("trends") > MIN_WATERMARK, 60, 0.2, "the authority to pick trends up")
        watermarks = ("watermarks", "--once", "--namespace", namespace, "--bootstrap", stack.bootstrap)
        shown = in_project(project, sys.executable, "-m", "mwcore", *watermarks)
        assert shown.returncode == 0, shown.stderr
        rows = {r["name"]: r for r in json.loads(shown.stdout)}
        assert rows["trends"]["kind"] == "computation" and rows["trends"]["input"] > MIN_WATERMARK
        joined(gen, SECONDS / SPEED + 60, "the log generator")
        wait_until(lambda: pub.input("trends") >= promise, 120, 0.2, "trends to catch up")
        horizon = pub.input("trends")
        assert all(p.alive and p.starts == 1 for p in procs.values()), "something else restarted"
    finally:
        trends.terminate()
        for p in procs.values():
            p.terminate()
        pub.close()

    project_registry = SchemaRegistry.from_directory(project / "schemas")
    counts = wire.serde(stack, registry, topic_name(namespace, "window_counts"), "zeitgeist.WindowCount")
    want: Counter[tuple[str, int]] = Counter()
    seen: set[bytes] = set()
    for m in read_topic(stack.bootstrap, topic_name(namespace, "window_counts")):
        if m.id in seen:  # a production re-sent after a crash has the same id
            continue
        seen.add(m.id)
        c = counts.decode(m.value)
        start = c["bucket_start"] // WINDOW_MS * WINDOW_MS
        if start + WINDOW_MS <= horizon:
            want[(c["query"], start)] += 1
    out = wire.serde(stack, project_registry, topic_name(namespace, "trends_counts"), "trends.Count")
    got = {}
    for m in read_topic(stack.bootstrap, topic_name(namespace, "trends_counts")):
        v = out.decode(m.value)
        got[(v["key"], v["window_start"])] = v["records"]
    assert want and dict(want) == got
