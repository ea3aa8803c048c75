"""One seam between Python and Rust (``mwcore.cores``): no library module outside it
imports the native module or compares a core's name, so nothing below the seam knows
which core runs. (The import is also an import contract in ``pyproject.toml``; this test
catches the comparison, which no import shows.)"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "mwcore"
SEAM = PACKAGE / "cores"
NAMES = {"native", "python"}


def knows_the_core(source: str) -> list[str]:
    """What in ``source`` imports ``mwcore_native`` or compares a core's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [
                f"line {node.lineno}: imports {m}" for m in modules if m.split(".")[0] == "mwcore_native"
            ]
        elif isinstance(node, ast.Compare | ast.MatchValue):
            parts = [node.left, *node.comparators] if isinstance(node, ast.Compare) else [node.value]
            if any(isinstance(c, ast.Constant) and c.value in NAMES for p in parts for c in ast.walk(p)):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_but_the_seam_knows_which_core_runs() -> None:
    modules = [p for p in PACKAGE.rglob("*.py") if SEAM not in p.parents]
    assert len(modules) > 100
    offenders = {str(p.relative_to(PACKAGE)): knows_the_core(p.read_text()) for p in modules}
    assert {m: f for m, f in offenders.items() if f} == {}


def test_the_seam_is_where_the_core_is_chosen() -> None:
    """(The check finds what it looks for: the seam itself compares names and imports
    the module.)"""
    seam = {str(p.relative_to(PACKAGE)): knows_the_core(p.read_text()) for p in SEAM.rglob("*.py")}
    assert seam["cores/__init__.py"] and seam["cores/native/__init__.py"]


def test_the_check_catches_a_module_that_chooses_for_itself() -> None:
    """The negative control: what the seam replaced (84916d8's ``dedup.py`` and
    ``redis_store.py``) is caught."""
    chose = "self._new = native().Bloom if core == 'native' else BloomFilter\n"
    imported = "import mwcore_native\nfrom mwcore_native import Bloom\n"
    matched = "match settings.core:\n    case 'python':\n        pass\n"
    assert knows_the_core(chose) == ["line 1: core == 'native'"]
    assert knows_the_core(imported) == ["line 1: imports mwcore_native", "line 2: imports mwcore_native"]
    assert knows_the_core(matched) == ["line 2: 'python'"]
