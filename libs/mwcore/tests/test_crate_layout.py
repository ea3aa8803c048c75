"""The native crate in the library's layers: its folders are the package's layers it
replaces parts of, each module uses only its own layer and those below (as the import
contracts hold the package, ``pyproject.toml``), no two modules use each other in a
circle, and ``lib.rs`` only lists and registers modules."""

from __future__ import annotations

import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "native" / "src"
# the package's layers, top first (pyproject.toml's layers contract), as the crate has them:
# folders, and at the bottom ``errors.rs`` (``mwcore/errors.py``)
LAYERS = [{"runtime"}, {"store", "transport"}, {"api"}, {"serde"}, {"errors"}]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}
USE = re.compile(r"\bcrate::((?:\w+::)*\w+)")


def module_of(path: Path) -> str:
    """``runtime/effects.rs`` -> ``runtime::effects`` (a ``mod.rs`` is its folder)."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return "::".join(parts[:-1] if parts[-1] == "mod" else parts)


def uses(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of the crate it uses (``use crate::a::b::Name``: ``a::b``)."""
    modules = set(sources)
    out: dict[str, set[str]] = {}
    for module, text in sources.items():
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
        used = set()
        for path in USE.findall(code):
            parts = path.split("::")
            while parts and "::".join(parts) not in modules:
                parts.pop()
            if parts and "::".join(parts) != module:
                used.add("::".join(parts))
        out[module] = used
    return out


def problems(sources: dict[str, str]) -> list[str]:
    """Every use against the layers, and a circle if there is one."""
    found = []
    graph = uses(sources)
    for module, used in graph.items():
        layer = module.split("::")[0]
        for other in used:
            if RANK[other.split("::")[0]] < RANK[layer]:
                found.append(f"{module} uses {other}, a layer above it")
            elif other.split("::")[0] != layer and RANK[other.split("::")[0]] == RANK[layer]:
                found.append(f"{module} uses {other}, a layer beside it")
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        found.append(f"a circle: {' -> '.join(exc.args[1])}")
    return found


def crate() -> dict[str, str]:
    return {
        module_of(p): p.read_text()
        for p in SRC.rglob("*.rs")
        if p.name != "lib.rs" and not p.stem.endswith("_tests") and p.stem != "testing"
    }


def test_the_crates_folders_are_layers_of_the_package() -> None:
    folders = {p.name for p in SRC.iterdir() if p.is_dir()}
    assert folders == set(RANK) - {"errors"}
    package = {p.name for p in (ROOT / "src" / "mwcore").iterdir() if (p / "__init__.py").exists()}
    assert folders <= package
    assert {p.name for p in SRC.iterdir() if p.is_file()} == {"lib.rs", "errors.rs"}
    assert (ROOT / "src" / "mwcore" / "errors.py").is_file()


def test_each_module_uses_its_layer_and_those_below_without_a_circle() -> None:
    sources = crate()
    assert len(sources) > 20
    assert problems(sources) == []


def test_lib_rs_only_lists_and_registers_modules() -> None:
    code = [
        line.strip()
        for line in (SRC / "lib.rs").read_text().splitlines()
        if line.strip() and not line.strip().startswith("//")
    ]
    functions = [line for line in code if re.match(r"(pub )?fn ", line)]
    assert functions == ["fn mwcore_native(m: &Bound<'_, PyModule>) -> PyResult<()> {"]
    statements = "".join(code[code.index(functions[0]) + 1 : -1]).split(";")
    assert statements[-1] == "Ok(())"
    assert all(re.match(r"m\.add(_class|_function)?[(:<]", s) for s in statements[:-1]), statements


def test_the_checks_find_a_use_upwards_and_a_circle() -> None:
    """The negative control: the consumer and its membership using each other (as at
    84916d8), and the store using the runtime's timers, are found."""
    sources = {
        "transport::consumer": "use crate::transport::membership::Membership;",
        "transport::membership": "use crate::transport::consumer::{failure, Part};",
        "store::checkpoint": "use crate::runtime::timers::Entry;",
        "runtime::timers": "",
    }
    found = problems(sources)
    assert "store::checkpoint uses runtime::timers, a layer above it" in found
    assert any(p.startswith("a circle:") and "transport::consumer" in p for p in found), found
