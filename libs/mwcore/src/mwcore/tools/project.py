"""A project's ``[tool.mw]`` table: where its services and schemas are, and what
``mw up`` and ``mw batch`` run. The library knows the application only through it.

In the project's ``pyproject.toml`` (every key optional; paths relative to the file)::

    [tool.mw]
    schemas = "schemas"       # the Avro schemas directory
    services = "services"     # the package services live in (`mw new-service` writes there)

    [tool.mw.up]              # what `mw up` runs on the local stack
    services = ["watermark_authority", "injector", "windower"]  # python -m <package>.<name>, in order
    streams = {queries = 4, window_counts = 4}                  # created first: stream = partitions
    pipeline = "services.up:Zeitgeist"                          # the hooks (mwcore.tools.up.plan.Pipeline)
    batch = ["model_trainer"]   # batch jobs among the services: run at a lower CPU priority

    [tool.mw.batch]           # what `mw batch` runs by default
    computations = ["services.windower.computation:Windower"]
    inputs = ["queries"]

The project is the nearest directory at or above the start whose ``pyproject.toml``
has a ``[tool.mw]`` table.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mwcore.errors import ConfigError

PACKAGE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
NAME = re.compile(r"^[A-Za-z_]\w*$")
TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module:attribute


@dataclass(frozen=True)
class UpConfig:
    """``[tool.mw.up]``: services started in order, streams created before them, and the
    application's hooks (``module:attribute``; None: no hooks). ``batch``: the services
    that are batch jobs (say, a Spark job), run at a lower CPU priority so that they take
    only the cores the streaming services leave (and finishing is what they do)."""

    services: tuple[str, ...]
    streams: Mapping[str, int] = field(default_factory=dict)
    pipeline: str | None = None
    batch: tuple[str, ...] = ()


@dataclass(frozen=True)
class BatchConfig:
    """``[tool.mw.batch]``: the defaults of ``mw batch --computations`` and ``--input``."""

    computations: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Project:
    root: Path  # the directory of the pyproject.toml
    schemas: Path  # absolute
    package: str = "services"  # the services' package, e.g. "services" or "app.services"
    up: UpConfig | None = None
    batch: BatchConfig | None = None

    @property
    def services_dir(self) -> Path:
        return self.root.joinpath(*self.package.split("."))

    @classmethod
    def default(cls, root: Path) -> Project:
        """A project without a ``[tool.mw]`` table: ``services/`` and ``schemas/``."""
        return cls(root=root, schemas=root / "schemas")


def find_project(start: Path | None = None) -> Project | None:
    """The project at or above ``start`` (default: the current directory); None if no
    ``pyproject.toml`` there has a ``[tool.mw]`` table."""
    base = (start or Path.cwd()).resolve()
    for d in (base, *base.parents):
        path = d / "pyproject.toml"
        if path.is_file():
            table = _tool_mw(path)
            if table is not None:
                return parse(table, d, str(path))
    return None


def _tool_mw(path: Path) -> dict[str, Any] | None:
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it as TOML: {exc}") from exc
    table = doc.get("tool", {}).get("mw")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.mw] must be a table")
    return table


def parse(table: Mapping[str, Any], root: Path, where: str = "pyproject.toml") -> Project:
    """A ``[tool.mw]`` table (as ``tomllib`` reads it) -> the project rooted at ``root``."""
    _known(table, ("schemas", "services", "up", "batch"), f"{where}: [tool.mw]")
    schemas = _string(table, "schemas", "schemas", f"{where}: [tool.mw]")
    package = _string(table, "services", "services", f"{where}: [tool.mw]")
    if not PACKAGE.match(package):
        raise ConfigError(
            f"{where}: [tool.mw] services = {package!r}: a Python package name, e.g. 'services'"
        )
    up = _table(table, "up", where)
    batch = _table(table, "batch", where)
    return Project(
        root=root,
        schemas=(root / schemas).resolve(),
        package=package,
        up=None if up is None else _up(up, f"{where}: [tool.mw.up]"),
        batch=None if batch is None else _batch(batch, f"{where}: [tool.mw.batch]"),
    )


def _up(table: Mapping[str, Any], where: str) -> UpConfig:
    _known(table, ("services", "streams", "pipeline", "batch"), where)
    services = _strings(table, "services", where, NAME, "a module name under the services package")
    if not services:
        raise ConfigError(f"{where}: services: name at least one service to start")
    if len(set(services)) != len(services):
        raise ConfigError(f"{where}: services: a service is named twice: {list(services)}")
    streams = table.get("streams", {})
    if not isinstance(streams, dict):
        raise ConfigError(f"{where}: streams must be a table of stream = partitions, e.g. {{queries = 4}}")
    for stream, n in streams.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"{where}: streams.{stream} = {n!r}: partitions must be a whole number >= 1")
    pipeline = table.get("pipeline")
    if pipeline is not None and (not isinstance(pipeline, str) or not TARGET.match(pipeline)):
        raise ConfigError(
            f"{where}: pipeline = {pipeline!r}: expected module:attribute, e.g. 'services.up:App'"
        )
    batch = _strings(table, "batch", where, NAME, "a module name under the services package")
    for name in batch:
        if name not in services:
            raise ConfigError(f"{where}: batch: {name!r} is not one of the services {list(services)}")
    return UpConfig(services=services, streams=dict(streams), pipeline=pipeline, batch=batch)


def _batch(table: Mapping[str, Any], where: str) -> BatchConfig:
    _known(table, ("computations", "inputs"), where)
    computations = _strings(table, "computations", where, TARGET, "module:Class")
    inputs = _strings(table, "inputs", where, None, "a stream name")
    return BatchConfig(computations=computations, inputs=inputs)


def _known(table: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(keys)})")


def _table(table: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
    value = table.get(key)
    if value is not None and not isinstance(value, dict):
        raise ConfigError(f"{where}: {key} must be a table ([tool.mw.{key}])")
    return value


def _string(table: Mapping[str, Any], key: str, default: str, where: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _strings(
    table: Mapping[str, Any], key: str, where: str, pattern: re.Pattern[str] | None, what: str
) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: {key} must be a list of strings ({what} each)")
    for v in value:
        if pattern is not None and not pattern.match(v):
            raise ConfigError(f"{where}: {key}: {v!r} is not {what}")
    return tuple(value)
