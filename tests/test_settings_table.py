"""The table of settings (docs/operating.md) is the settings classes': every variable a settings
class of the kit or of the Zeitgeist services reads has its row, every row names
variables some class reads (besides the two families read apart, ``MW_KAFKA_*`` and
``MW_UNSAFE_*``), and where a row's default is a plain value it is the field's default.
Test plumbing (``process/plumbing.py``) is no setting and has no row.

It fails on the README of 84916d8, which still had the native core's development
switches and the test plumbing in its table."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings

from mwcore.process.environment import READ_APART, variables
from mwcore.process.plumbing import Plumbing
from mwcore.process.settings import (
    AuthoritySettings,
    CommandSettings,
    InjectorSettings,
    StackSettings,
    WorkerSettings,
)
from services.dip_detector.settings import DetectorSettings
from services.injector.settings import InjectorSettings as QueryLogSettings
from services.model_trainer.settings import TrainerSettings

ROOT = Path(__file__).resolve().parents[1]
CLASSES: list[type[BaseSettings]] = [
    WorkerSettings,
    AuthoritySettings,
    InjectorSettings,
    CommandSettings,
    StackSettings,
    QueryLogSettings,
    DetectorSettings,
    TrainerSettings,
]
FAMILIES = ("MW_KAFKA_<PROPERTY>", "MW_UNSAFE_<SWITCH>", "MW_KAFKA_CONFIG")


def table() -> list[tuple[list[str], str]]:
    """Each row of the settings table (docs/operating.md): its variables, and its defaults cell."""
    lines = (ROOT / "docs" / "operating.md").read_text().splitlines()
    start = lines.index("| variable | read by | meaning | default |")
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows.append((re.findall(r"`(MW_[A-Z0-9_<>]+)`", cells[0]), cells[-1]))
    return rows


def fields() -> dict[str, tuple[type[BaseSettings], str]]:
    """variable -> (a class that reads it, its field)."""
    out: dict[str, tuple[type[BaseSettings], str]] = {}
    for cls in CLASSES:
        for var, name in variables(cls).items():
            out.setdefault(var, (cls, name))
    return out


def test_every_setting_has_its_row_and_every_row_is_a_setting() -> None:
    documented = {v for names, _ in table() for v in names}
    settings = set(fields())
    assert settings - documented == set(), "settings without a row"
    rows = {v for v in documented - settings if v not in FAMILIES}
    assert rows == set(), "rows of no setting"
    assert {f.removesuffix("<PROPERTY>").removesuffix("<SWITCH>") for f in FAMILIES[:2]} <= set(READ_APART)
    assert not documented & set(variables(Plumbing)), "test plumbing is no setting"


def _plain(cell: str) -> str | None:
    """A default cell's value when it is a plain one (else None: prose)."""
    text = cell.replace("`", "").split(" (")[0].strip()
    return text if re.fullmatch(r"[\w.\-\[\]:]+", text) else None


def _matches(text: str, default: Any) -> bool:
    if isinstance(default, bool):
        return text.lower() in (("true", "1") if default else ("false", "0"))
    if isinstance(default, int | float):
        return float(text) == float(default)
    return text == str(default)


@pytest.mark.parametrize(
    "row", [r for r in table() if r[0] and r[0][0] not in FAMILIES], ids=lambda r: " / ".join(r[0])
)
def test_a_rows_plain_defaults_are_the_fields_defaults(row: tuple[list[str], str]) -> None:
    names, cell = row
    known = fields()
    parts = cell.split(" / ")
    if len(parts) != len(names):
        parts = [cell] * len(names) if len(names) == 1 else []
    checked = 0
    for var, part in zip(names, parts, strict=False):
        if var not in known:
            continue
        cls, name = known[var]
        info = cls.model_fields[name]
        text = _plain(part)
        if part.startswith("required"):
            assert info.is_required(), var
            checked += 1
        elif text == "unset":
            assert info.default is None, var
            checked += 1
        elif text is not None and info.default_factory is None:
            assert _matches(text, info.default), (
                f"{var}: docs/operating.md says {text!r}, the field {info.default!r}"
            )
            checked += 1
    assert checked or not parts or all(_plain(p) is None and not p.startswith("required") for p in parts)
