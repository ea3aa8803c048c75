"""What ``mw up`` would run, without running it: the plan from ``[tool.mw.up]``, the
application's hooks loaded by name, and the built-in example."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwcore.errors import ConfigError
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.project import find_project
from mwcore.tools.up.example import SCHEMAS, RunningSumPipeline
from mwcore.tools.up.plan import NoHooks, Pipeline, Plan, Service, example_plan, load_pipeline, project_plan
from mwcore.tools.up.view import lag_s

HOOKS = """
class Hooks:
    title = "demo"
    decoded_streams = ("counts",)
    def environment(self, workdir): return {"*": {"DEMO_DIR": str(workdir)}}
    def start(self, env, stop, rate, duration): pass
    def on_record(self, stream, value, record_id): pass
    def view_lines(self): return []
    def summary(self, counts, watermarks): return {}

class Half:
    title = "half"
"""


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Path]:
    """A project with its hooks in ``demo_up_hooks.py``, taken out of sys.modules after."""
    (tmp_path / "pyproject.toml").write_text(
        "[tool.mw]\nservices = 'flows'\n"
        "[tool.mw.up]\nservices = ['authority', 'counter']\nstreams = {clicks = 2}\n"
        "pipeline = 'demo_up_hooks:Hooks'\nbatch = ['counter']\n"
    )
    (tmp_path / "demo_up_hooks.py").write_text(HOOKS)
    yield tmp_path
    sys.modules.pop("demo_up_hooks", None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def test_a_plan_from_the_table(app: Path) -> None:
    project = find_project(app)
    assert project is not None
    plan = project_plan(project)
    assert plan.services == (
        Service("authority", ("-m", "flows.authority")),
        Service("counter", ("-m", "flows.counter"), batch=True),
    )
    assert plan.streams == {"clicks": 2} and plan.schemas == app / "schemas" and plan.root == app
    assert isinstance(plan.pipeline, Pipeline) and plan.pipeline.title == "demo"


def test_no_pipeline_named_means_no_hooks(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.mw.up]\nservices = ['a']\n")
    project = find_project(tmp_path)
    assert project is not None and isinstance(project_plan(project).pipeline, NoHooks)


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("no_such_module_here:Hooks", "cannot import no_such_module_here"),
        ("demo_up_hooks:Missing", "has no class or function Missing"),
        ("demo_up_hooks:Half", "does not implement mwcore.tools.up.plan.Pipeline"),
    ],
)
def test_hooks_that_cannot_be_loaded(app: Path, target: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_pipeline(target, app)


def test_the_example_plan_carries_its_schemas(tmp_path: Path) -> None:
    plan = example_plan(tmp_path)
    assert isinstance(plan.pipeline, RunningSumPipeline) and isinstance(plan.pipeline, Pipeline)
    assert [s.args for s in plan.services] == [
        ("-m", "mwcore", "run", "mwcore.examples.running_sum:RunningSum")
    ] * 2
    registry = SchemaRegistry.from_directory(plan.schemas)
    assert {"mw.examples.Number", "mw.examples.Sum"} <= set(registry.names())
    assert plan.root is None  # the workers run the library's own computation
    assert isinstance(NoHooks(), Pipeline)


def test_the_example_schemas_are_the_repository_s() -> None:
    repo = Path(__file__).resolve().parents[3] / "schemas" / "examples"
    if not repo.is_dir():
        pytest.skip("not in the repository")
    for name, doc in SCHEMAS.items():
        assert json.loads((repo / name).read_text()) == doc


def test_lag_is_none_while_the_watermark_is_held() -> None:
    from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK

    assert lag_s(MIN_WATERMARK, 10_000) is None and lag_s(MAX_WATERMARK, 10_000) is None
    assert lag_s(7_500, 10_000) == 2.5


def test_batch_jobs_start_at_a_lower_cpu_priority(tmp_path: Path) -> None:
    """A service the table names in ``batch`` runs at BATCH_NICENESS more than ``mw up``
    itself (and its children with it); the others at ``mw up``'s own."""
    import os
    import subprocess

    from mwcore.tools.up import runner

    says = (
        "-c",
        "import os, subprocess; print(os.getpriority(os.PRIO_PROCESS, 0)); subprocess.run(['nice'])",
    )
    services = (Service("stream", says), Service("trainer", says, batch=True))
    plan = Plan(services=services, streams={}, schemas=tmp_path, pipeline=NoHooks())
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        runner._start_services(plan, dict(os.environ), {}, tmp_path, procs)
        codes = [p.wait(30) for p in procs.values()]
    finally:
        for p in procs.values():
            p.kill()
    said = {n: (tmp_path / f"{n}.log").read_text() for n in procs}
    assert codes == [0, 0], said
    own = os.getpriority(os.PRIO_PROCESS, 0)
    nicer = min(19, own + runner.BATCH_NICENESS)  # added to mw up's own, at most 19
    assert {n: text.split() for n, text in said.items()} == {
        "stream": [str(own), str(own)],
        "trainer": [str(nicer), str(nicer)],  # the job, and what it starts
    }
