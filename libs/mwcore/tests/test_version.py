"""The version: from the repository's git tags (``v<X.Y.Z>``, setuptools-scm), shown by
``mw --version`` and ``mwcore.__version__``; a tree without git has the stated fallback,
0.0.0."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import mwcore
from mwcore.tools.cli import build_parser

LIB = Path(__file__).resolve().parents[1]
PEP440 = re.compile(r"^\d+\.\d+(\.\d+)?(\.dev\d+)?$")


def test_mw_version_prints_the_installed_version(capsys: object) -> None:
    installed = importlib.metadata.version("mwcore")
    assert mwcore.__version__ == installed
    assert PEP440.match(installed), installed
    done = subprocess.run(
        [sys.executable, "-m", "mwcore", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"mw (mwcore) {installed}"
    assert build_parser().prog == "mw"


def test_a_tree_without_git_builds_as_the_fallback_version(tmp_path: Path) -> None:
    tree = tmp_path / "libs" / "mwcore"  # where the repository root would be: no git there
    shutil.copytree(
        LIB, tree, ignore=shutil.ignore_patterns("tests", "native", "build", "*.egg-info", "__pycache__")
    )
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(tree),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("mwcore-*.whl")
    assert wheel.name.startswith("mwcore-0.0.0-"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        meta = z.read("mwcore-0.0.0.dist-info/METADATA").decode()
    assert "\nVersion: 0.0.0\n" in meta
