"""``mw new-service NAME``: a new service from the template.

Creates, in the project (``mwcore.tools.project``: the directory whose pyproject.toml
has a ``[tool.mw]`` table, else the one holding ``services/`` and ``schemas/``), with
PKG its services' package (``[tool.mw] services``, by default ``services``) and
SCHEMAS its schemas directory (``[tool.mw] schemas``):

- ``PKG/NAME/computation.py``: a computation reading one existing stream that counts
  each key's records per 10-second window of event time and produces each window's
  count to ``NAME_counts`` once the low watermark has passed the window (state, an
  event-time timer, a production: the three things a computation does);
- ``PKG/NAME/__main__.py``: ``python -m PKG.NAME`` runs one worker;
- ``PKG/NAME/tests/test_computation.py``: its unit test, in memory;
- ``PKG/NAME/tests/test_on_containers.py``: the same windows from a worker process on
  Kafka, Redis and the schema registry in containers (``mwcore[testing]``'s ``mw_run``:
  skipped where no Docker engine answers);
- ``SCHEMAS/NAME/count.avsc``: the output's Avro schema, with docs on each field;
- its service in ``docker-compose.yml`` (the shared image, the shared environment).

The input stream is ``--input``, its schema found where the project's computations
declare the stream (or given with ``--input-schema``); without ``--input``, a stream the
pipeline produces that nothing consumes yet (the pipeline's end).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from mwcore.errors import ConfigError
from mwcore.tools.project import Project, find_project

NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


@dataclass(frozen=True)
class Stream:
    name: str
    schema: str
    produced: bool  # some computation outputs it
    consumed: bool  # some computation reads it


def find(start: Path | None = None) -> Project:
    """The project at or above ``start`` (default: the current directory)."""
    project = find_project(start)
    if project is not None:
        return project
    base = (start or Path.cwd()).resolve()
    for d in (base, *base.parents):
        if (d / "services").is_dir() and (d / "schemas").is_dir():
            return Project.default(d)
    raise ConfigError(
        f"no project at or above {base}: no pyproject.toml with a [tool.mw] table, "
        "and no directory with services/ and schemas/"
    )


def computation_pattern(package: str) -> re.Pattern[str]:
    """A ``"<package>.module:Class"`` string in a service's ``__main__.py``."""
    return re.compile(rf"""["']({re.escape(package)}(?:\.\w+)+:\w+)["']""")


def declared_streams(project: Project) -> dict[str, Stream]:
    """Streams the project's services declare (loading each service's computation)."""
    import sys

    from mwcore.api.computation import load_computation

    if str(project.root) not in sys.path:
        sys.path.insert(0, str(project.root))
    pattern = computation_pattern(project.package)
    out: dict[str, Stream] = {}
    for main in sorted(project.services_dir.glob("*/__main__.py")):
        for target in pattern.findall(main.read_text()):
            try:
                comp = load_computation(target)
            except ConfigError:
                continue
            for i in comp.inputs:
                s = out.get(i.stream)
                out[i.stream] = Stream(i.stream, i.schema or "", bool(s and s.produced), True)
            for o in comp.outputs:
                s = out.get(o.stream)
                out[o.stream] = Stream(o.stream, o.schema, True, bool(s and s.consumed))
    return out


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _pick_input(project: Project, stream: str | None, schema: str | None) -> tuple[str, str]:
    streams = declared_streams(project)
    if stream is None:
        ends = sorted(s.name for s in streams.values() if s.produced and not s.consumed)
        if not ends:
            raise ConfigError("no stream to read: pass --input STREAM --input-schema SCHEMA")
        stream = ends[0]
    if schema is None:
        if stream not in streams:
            known = ", ".join(sorted(streams)) or "none"
            raise ConfigError(
                f"no service declares stream {stream!r} (declared: {known}); pass --input-schema SCHEMA"
            )
        schema = streams[stream].schema
    return stream, schema


def new_service(
    name: str, project: Project, *, input_stream: str | None = None, input_schema: str | None = None
) -> list[Path]:
    """Create the service; the files written (the compose file last, if there is one)."""
    if not NAME.match(name):
        raise ConfigError(f"service name {name!r}: use lower case letters, digits and _ (e.g. trend_counter)")
    target = project.services_dir / name
    if target.exists():
        raise ConfigError(f"{target} exists already")
    if not project.schemas.is_dir():
        raise ConfigError(f"no schemas directory {project.schemas} (set [tool.mw] schemas in pyproject.toml)")
    stream, schema = _pick_input(project, input_stream, input_schema)
    from mwcore.serde.avro import SchemaRegistry

    known = SchemaRegistry.from_directory(project.schemas)
    known.latest(schema)  # a clear error if the input's schema is not in the schemas directory
    if any(n.startswith(f"{name}.") for n in known.names()):
        raise ConfigError(f"schemas in namespace {name!r} exist already")
    fill = {
        "package": project.package,
        "name": name,
        "cls": _class_name(name),
        "input": stream,
        "schema": schema,
        "output": f"{name}_counts",
        **_test_registry(project, name),
    }
    files = {
        target / "__init__.py": f'"""The {name} service (generated by `mw new-service {name}`)."""\n',
        target / "__main__.py": MAIN.format(**fill),
        target / "computation.py": COMPUTATION_PY.format(**fill),
        target / "tests" / "__init__.py": "",
        target / "tests" / "test_computation.py": TEST_PY.format(**fill),
        target / "tests" / "test_on_containers.py": CONTAINERS_TEST_PY.format(**fill),
        project.schemas / name / "count.avsc": json.dumps(count_schema(name), indent=2) + "\n",
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    written = list(files)
    compose = project.root / "docker-compose.yml"
    if compose.exists():
        compose.write_text(add_to_compose(compose.read_text(), name, project.package))
        written.append(compose)
    return written


def _test_registry(project: Project, name: str) -> dict[str, str]:
    """How the generated test finds the schemas: ``Harness`` looks for ``schemas/``
    above the current directory; any other directory is named, from the test's file."""
    fill = {
        "imports": "",
        "schemas": "",
        "harness_args": _class_name(name),
        # the containers' test: its imports, and where its schemas are
        "c_imports": "from mwcore import SchemaRegistry\n"
        "from mwcore.testing import example_value, find_schemas\n",
        "c_schemas": "find_schemas()",
        "c_run_args": "",
    }
    if project.schemas == project.root / "schemas":
        return fill
    try:
        relative = project.schemas.relative_to(project.root).as_posix()
    except ValueError:
        raise ConfigError(
            f"the schemas directory {project.schemas} is outside the project {project.root}"
        ) from None
    up = len(project.package.split(".")) + 2  # tests/ -> NAME/ -> the package's directories
    fill["imports"] = "from pathlib import Path\n\nfrom mwcore import SchemaRegistry\n"
    fill["schemas"] = f'\nSCHEMAS = Path(__file__).resolve().parents[{up}] / "{relative}"\n'
    fill["harness_args"] += ", SchemaRegistry.from_directory(SCHEMAS)"
    fill["c_imports"] = (
        "from pathlib import Path\n\nfrom mwcore import SchemaRegistry\n"
        "from mwcore.testing import example_value\n"
    )
    fill["c_schemas"] = "SCHEMAS"
    fill["c_run_args"] = ", schemas=SCHEMAS"
    return fill


def count_schema(name: str) -> dict[str, object]:
    return {
        "type": "record",
        "name": "Count",
        "namespace": name,
        "version": 1,
        "doc": f"Records per key per 10-second window of event time (stream `{name}_counts`, keyed by key).",
        "fields": [
            {"name": "key", "type": "string", "doc": "The key of the input records (the record key)."},
            {"name": "window_start", "type": "long", "doc": "Start of the window, ms since the epoch."},
            {"name": "records", "type": "long", "doc": "Input records with a timestamp in the window."},
        ],
    }


def add_to_compose(text: str, name: str, package: str = "services") -> str:
    """The compose file with a service for ``name`` (the shared image and environment),
    put before the top-level ``volumes:`` (or at the end)."""
    entry = f'  {name}:\n    <<: *mw-service\n    command: ["python", "-m", "{package}.{name}"]\n\n'
    if re.search(rf"^  {re.escape(name)}:\s*$", text, re.M):
        raise ConfigError(f"docker-compose.yml has a service {name!r} already")
    if "*mw-service" not in text and "&mw-service" not in text:
        raise ConfigError("docker-compose.yml has no &mw-service anchor to build the new service on")
    at = re.search(r"^volumes:", text, re.M)
    if at is None:
        return text.rstrip("\n") + "\n\n" + entry
    return text[: at.start()] + entry + text[at.start() :]


MAIN = '''"""``python -m {package}.{name}``: one {name} worker process (``mw run``)."""

import sys

from mwcore import run_computation

if __name__ == "__main__":
    sys.exit(run_computation("{package}.{name}.computation:{cls}"))
'''

COMPUTATION_PY = '''"""{cls}: reads `{input}` and counts each key's records per 10-second window.

Generated by `mw new-service {name}`; make it yours. The computation stays pure: it
asks for state, timers and productions through `ctx`, and the runtime commits them
atomically, exactly once, per key. A low-watermark timer at the window's end makes
the count final: every record of the window has arrived by then.
"""

from __future__ import annotations

from mwcore import Computation, Context, Input, Output, Record, TimeDomain, Timer

WINDOW_MS = 10_000
Counts = dict[str, int]  # the state, per key: window start -> records so far


class {cls}(Computation[Counts]):
    name = "{name}"
    inputs = (Input("{input}", schema="{schema}"),)
    outputs = (Output("{output}", schema="{name}.Count"),)

    def process_record(self, ctx: Context[Counts], record: Record) -> None:
        counts = ctx.state.get() or {{}}
        start = record.timestamp // WINDOW_MS * WINDOW_MS
        if str(start) not in counts:  # fire when the watermark passes the window's end
            ctx.timers.set(str(start), start + WINDOW_MS - 1, TimeDomain.EVENT)
        counts[str(start)] = counts.get(str(start), 0) + 1
        ctx.state.set(counts)

    def process_timer(self, ctx: Context[Counts], timer: Timer) -> None:
        counts = ctx.state.get() or {{}}
        n = counts.pop(timer.tag, 0)
        value = {{"key": ctx.key, "window_start": int(timer.tag), "records": n}}
        ctx.produce("{output}", value, timer.timestamp)
        if counts:
            ctx.state.set(counts)
        else:
            ctx.state.clear()
'''

TEST_PY = '''"""{cls} in memory: a window's count comes out once the watermark passes its end."""

from __future__ import annotations

{imports}from mwcore.testing import Harness, example_value
from {package}.{name}.computation import {cls}
{schemas}

def test_counts_per_window_once_the_watermark_passes() -> None:
    h = Harness({harness_args})
    value = example_value(h.registry, "{schema}")
    for ts in (1_000, 9_999, 10_000):
        h.send("{input}", value, ts, key="k")
    assert h.output("{output}") == []  # nothing is final before the watermark says so
    h.advance_watermark(10_000)
    assert h.values("{output}") == [{{"key": "k", "window_start": 0, "records": 2}}]
    h.finish()  # the end of input
    assert h.values("{output}")[1:] == [{{"key": "k", "window_start": 10_000, "records": 1}}]
    assert h.keys() == []  # no state left behind
'''

CONTAINERS_TEST_PY = '''"""{cls} as it runs in production: a worker process (`python -m mwcore run`) on
Kafka, Redis and a schema registry in containers, through `mw_run` (mwcore[testing]'s
pytest plugin). Skipped, with the reason, where no Docker engine answers or an image
is missing (the images: docs/testing.md)."""

from __future__ import annotations

{c_imports}from mwcore.testing.containers import RunOnContainers
from {package}.{name}.computation import {cls}
{schemas}

def test_counts_per_window_on_containers(mw_run: RunOnContainers) -> None:
    value = example_value(SchemaRegistry.from_directory({c_schemas}), "{schema}")
    sent = [("k", value, ts) for ts in (1_000, 9_999, 10_000)]
    # the input written, then the watermark at its end: every window's timer fires
    run = mw_run({cls}, {{"{input}": sent}}, expect={{"{output}": 2}}{c_run_args})
    assert run.values("{output}") == [
        {{"key": "k", "window_start": 0, "records": 2}},
        {{"key": "k", "window_start": 10_000, "records": 1}},
    ]
'''
