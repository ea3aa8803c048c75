"""The commands that read ``[tool.mw]``: ``mw new-service`` writes where the table
says (a package and a schemas directory of its own choosing), and ``mw batch`` takes
its defaults from it, or asks for them."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mwcore.errors import ConfigError
from mwcore.tools.cli import build_parser
from mwcore.tools.commands import batch_defaults
from mwcore.tools.project import Project
from mwcore.tools.scaffold import computation_pattern, find, new_service

CLICK = {
    "type": "record",
    "name": "Click",
    "namespace": "app",
    "doc": "A click.",
    "fields": [{"name": "page", "type": "string", "doc": "The page clicked."}],
}


def app_project(root: Path) -> Path:
    (root / "pyproject.toml").write_text("[tool.mw]\nschemas = 'avro'\nservices = 'app.flows'\n")
    (root / "avro" / "app").mkdir(parents=True)
    (root / "avro" / "app" / "click.avsc").write_text(json.dumps(CLICK))
    for pkg in (root / "app", root / "app" / "flows"):
        pkg.mkdir(exist_ok=True)
        (pkg / "__init__.py").write_text("")
    return root


def test_a_new_service_goes_where_the_table_says(tmp_path: Path) -> None:
    root = app_project(tmp_path)
    project = find(root / "app")
    assert project.package == "app.flows" and project.schemas == root / "avro"
    written = new_service("counter", project, input_stream="clicks", input_schema="app.Click")
    assert root / "app/flows/counter/computation.py" in written
    assert (root / "avro/counter/count.avsc").is_file()
    main = (root / "app/flows/counter/__main__.py").read_text()
    assert "from mwcore import run_computation" in main and "mwcore.tools" not in main
    assert computation_pattern("app.flows").findall(main) == ["app.flows.counter.computation:Counter"]
    assert computation_pattern("services").findall(main) == []
    # its own test passes, finding the schemas in avro/ from anywhere; its test on
    # containers (tests/test_containers.py runs one, with an engine) is collected
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(root), str(src)))}

    def pytest_in_project(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root), *args]
        return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)

    tested = pytest_in_project(
        "app/flows/counter", "--ignore", "app/flows/counter/tests/test_on_containers.py"
    )
    assert tested.returncode == 0 and "1 passed" in tested.stdout, tested.stdout + tested.stderr
    collected = pytest_in_project("--collect-only", "app/flows/counter")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "test_on_containers.py::test_counts_per_window_on_containers" in collected.stdout


def test_without_a_table_the_project_holds_services_and_schemas(tmp_path: Path) -> None:
    (tmp_path / "services").mkdir()
    (tmp_path / "schemas").mkdir()
    (tmp_path / "services" / "deep").mkdir()
    assert find(tmp_path / "services" / "deep") == Project.default(tmp_path)


def test_no_project_at_all(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no pyproject\.toml with a \[tool\.mw\] table"):
        find(tmp_path)


def batch_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["batch", "--out", "o", *argv])


def test_batch_defaults_come_from_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.mw.batch]\ncomputations = ['a.b:C', 'a.d:E']\ninputs = ['clicks', 'views']\n"
    )
    monkeypatch.chdir(tmp_path)
    assert batch_defaults(batch_args()) == (["a.b:C", "a.d:E"], "clicks,views")
    assert batch_defaults(batch_args("--computations", "x:Y", "--input", "q")) == (["x:Y"], "q")


def test_batch_without_defaults_asks_for_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="pass --computations"):
        batch_defaults(batch_args("--input", "q"))
    with pytest.raises(ConfigError, match="pass --input"):
        batch_defaults(batch_args("--computations", "x:Y"))
