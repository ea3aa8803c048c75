"""What one ``mw up`` runs: its services, its streams, its schemas, and the
application's part in it (``Pipeline``), from the project's ``[tool.mw.up]`` table
or, without one, the library's running-sum example."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mwcore.errors import ConfigError
from mwcore.tools.project import Project


@runtime_checkable
class Pipeline(Protocol):
    """An application's part in ``mw up``: named by ``[tool.mw.up] pipeline`` as
    ``module:attribute``, a class (or any callable) taking no arguments.

    The runner calls ``environment`` once before the services start, ``start`` once
    after they have, then ``on_record`` and ``view_lines`` from its loop (one thread,
    never at once), and ``summary`` once, after ``stop`` is set and the last records
    were handed over. Only built-in types cross it, so an application implements it
    without importing mwcore.
    """

    @property
    def title(self) -> str:
        """What the live view calls the pipeline, e.g. "Zeitgeist"."""
        ...

    @property
    def decoded_streams(self) -> Collection[str]:
        """Streams whose records go to ``on_record``, decoded."""
        ...

    def environment(self, workdir: Path) -> dict[str, dict[str, str]]:
        """Settings of each service by its name (``"*"``: of every one), on top of the
        ``MW_*`` addresses (``workdir``: the run's directory, for files the services and
        the feed share). A service is given only its own: a worker refuses an ``MW_*``
        variable no setting of its own reads (``process/environment.py``)."""
        ...

    def start(self, env: Mapping[str, str], stop: threading.Event, rate: int, duration: float | None) -> None:
        """Start feeding input (in a thread of its own; return at once) at about ``rate``
        records a second until ``stop`` is set. ``env``: what every service got."""
        ...

    def on_record(self, stream: str, value: Any, record_id: bytes) -> None:
        """A record of a decoded stream, once per id, in each partition's order."""
        ...

    def view_lines(self) -> list[str]:
        """Lines of its own for the live view, redrawn every second."""
        ...

    def summary(self, counts: Mapping[str, int], watermarks: Mapping[str, int]) -> dict[str, Any]:
        """Its fields of the JSON summary, given records per stream and each
        computation's input low watermark (ms)."""
        ...


class NoHooks:
    """The pipeline when the project names none: nothing fed, nothing decoded."""

    title = "the pipeline"
    decoded_streams: Collection[str] = ()

    def environment(self, workdir: Path) -> dict[str, dict[str, str]]:
        return {}

    def start(self, env: Mapping[str, str], stop: threading.Event, rate: int, duration: float | None) -> None:
        pass

    def on_record(self, stream: str, value: Any, record_id: bytes) -> None:
        pass

    def view_lines(self) -> list[str]:
        return []

    def summary(self, counts: Mapping[str, int], watermarks: Mapping[str, int]) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class Service:
    name: str
    args: tuple[str, ...]  # after the interpreter, e.g. ("-m", "services.windower")
    batch: bool = False  # a batch job: run at a lower CPU priority (BATCH_NICENESS)


@dataclass(frozen=True)
class Plan:
    """What one ``mw up`` runs."""

    services: tuple[Service, ...]  # started in this order
    streams: Mapping[str, int]  # stream -> partitions, created first
    schemas: Path
    pipeline: Pipeline
    root: Path | None = None  # the services' working directory, first on their PYTHONPATH


def load_pipeline(target: str, root: Path) -> Pipeline:
    """``module:attribute`` under ``root`` -> the hooks object it makes."""
    module_name, _, attr = target.partition(":")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"[tool.mw.up] pipeline = {target!r}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(
            f"[tool.mw.up] pipeline = {target!r}: {module_name} has no class or function {attr}"
        )
    hooks = factory()
    if not isinstance(hooks, Pipeline):
        raise ConfigError(
            f"[tool.mw.up] pipeline = {target!r} does not implement mwcore.tools.up.plan.Pipeline"
        )
    return hooks


def project_plan(project: Project) -> Plan:
    assert project.up is not None
    return Plan(
        services=tuple(
            Service(n, ("-m", f"{project.package}.{n}"), batch=n in project.up.batch)
            for n in project.up.services
        ),
        streams=project.up.streams,
        schemas=project.schemas,
        pipeline=load_pipeline(project.up.pipeline, project.root) if project.up.pipeline else NoHooks(),
        root=project.root,
    )


def example_plan(workdir: Path) -> Plan:
    """The running-sum example: two workers of one computation, fed by ``mw up``."""
    from mwcore.tools.up import example

    return Plan(
        services=tuple(
            Service(f"running_sum-{i}", ("-m", "mwcore", "run", example.COMPUTATION))
            for i in range(1, example.WORKERS + 1)
        ),
        streams=example.STREAMS,
        schemas=example.write_schemas(workdir / "schemas"),
        pipeline=example.RunningSumPipeline(),
    )
