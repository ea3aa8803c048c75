"""The ``[tool.mw]`` table: found at or above a directory, defaults, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from mwcore.errors import ConfigError
from mwcore.tools.project import BatchConfig, Project, UpConfig, find_project, parse

FULL = """
[project]
name = "app"

[tool.mw]
schemas = "avro"
services = "app.flows"

[tool.mw.up]
services = ["authority", "counter"]
streams = {clicks = 4, counts = 2}
pipeline = "app.up:Hooks"
batch = ["counter"]

[tool.mw.batch]
computations = ["app.flows.counter.computation:Counter"]
inputs = ["clicks"]
"""


def write(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pyproject.toml").write_text(text)
    return directory


def test_a_full_table_read_from_a_directory_below(tmp_path: Path) -> None:
    root = write(tmp_path / "app", FULL)
    below = root / "app" / "flows"
    below.mkdir(parents=True)
    assert find_project(below) == Project(
        root=root,
        schemas=root / "avro",
        package="app.flows",
        up=UpConfig(("authority", "counter"), {"clicks": 4, "counts": 2}, "app.up:Hooks", ("counter",)),
        batch=BatchConfig(("app.flows.counter.computation:Counter",), ("clicks",)),
    )
    assert find_project(below).services_dir == root / "app" / "flows"  # type: ignore[union-attr]


def test_defaults_of_an_empty_table(tmp_path: Path) -> None:
    project = find_project(write(tmp_path, "[tool.mw]\n"))
    assert project == Project(root=tmp_path, schemas=tmp_path / "schemas", package="services")
    assert project.up is None and project.batch is None
    assert project.services_dir == tmp_path / "services"
    up = parse({"up": {"services": ["a"]}}, tmp_path).up
    assert up == UpConfig(services=("a",), streams={}, pipeline=None)


def test_a_pyproject_without_the_table_is_passed_over(tmp_path: Path) -> None:
    outer = write(tmp_path, "[tool.mw]\nschemas = 'avro'\n")
    inner = write(tmp_path / "lib", "[project]\nname = 'lib'\n")
    found = find_project(inner)
    assert found is not None and found.root == outer and found.schemas == outer / "avro"


def test_no_table_anywhere(tmp_path: Path) -> None:
    assert find_project(write(tmp_path, "[tool.other]\nx = 1\n")) is None


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("[tool.mw]\nschema = 'avro'", "unknown key 'schema'"),
        ("[tool.mw]\nschemas = 3", "schemas must be a non-empty string"),
        ("[tool.mw]\nservices = 'my-services'", "a Python package name"),
        ("[tool.mw]\nup = 1", "up must be a table"),
        ("[tool.mw.up]\nstreams = {a = 1}", "name at least one service"),
        ("[tool.mw.up]\nservices = 'windower'", "services must be a list of strings"),
        ("[tool.mw.up]\nservices = ['a.b']", "'a.b' is not a module name"),
        ("[tool.mw.up]\nservices = ['a', 'a']", "named twice"),
        ("[tool.mw.up]\nservices = ['a']\nstreams = {q = 0}", "streams.q = 0: partitions"),
        ("[tool.mw.up]\nservices = ['a']\nstreams = ['q']", "streams must be a table"),
        ("[tool.mw.up]\nservices = ['a']\npipeline = 'services.up'", "expected module:attribute"),
        ("[tool.mw.up]\nservices = ['a']\nsevrices = ['b']", "[tool.mw.up]: unknown key 'sevrices'"),
        ("[tool.mw.up]\nservices = ['a']\nbatch = ['b']", "batch: 'b' is not one of the services ['a']"),
        ("[tool.mw.up]\nservices = ['a']\nbatch = 'a'", "batch must be a list of strings"),
        ("[tool.mw.batch]\ncomputations = ['Windower']", "'Windower' is not module:Class"),
        ("[tool.mw]\nschemas = [", "cannot read it as TOML"),
    ],
)
def test_a_bad_table_names_what_to_fix(tmp_path: Path, table: str, says: str) -> None:
    write(tmp_path, table + "\n")
    with pytest.raises(ConfigError, match=r"pyproject\.toml") as err:
        find_project(tmp_path)
    assert says in str(err.value)
