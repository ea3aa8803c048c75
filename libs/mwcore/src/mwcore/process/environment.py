"""Settings read from the environment: ``load_settings`` (a ``ConfigError`` naming each
bad variable), and which ``MW_*`` variables a process knows, and the refusal of any other.

A variable is known when a settings class defined in the process reads it: the kit's
(``settings.py``, ``plumbing.py``) and the application's own (a service's settings
class, defined by the time its settings are read). Besides those, three families
are read apart: ``MW_UNSAFE_*`` (the negative controls, checked by
``settings.negative_controls``), ``MW_KAFKA_*`` (librdkafka's client properties,
``transport/client_properties.py``) and ``MW_TEST_*`` (left to tests' own code). Any
other ``MW_*`` variable stops a process of a pipeline (a worker, the authority, an
injector, the model job: whatever reads its settings through
``settings.ClientSettings.load``) at start with one line (exit 2): a misspelt setting
would otherwise be ignored and its default used. A variable the kit no longer reads
says what replaced it. (The ``mw`` commands and the Spark source, which read only what
they fall back on, do not refuse: a shell or a Spark executor may hold another
process's settings.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from mwcore.errors import ConfigError

PREFIX = "MW_"
READ_APART = ("MW_UNSAFE_", "MW_KAFKA_", "MW_TEST_")

# name -> what replaced it (the development switches of the native core, 2026-12-02)
REMOVED: dict[str, str] = {
    "MW_NATIVE_CONSUMER": "the native core always reads with its own consumer; MW_CORE=python runs the "
    "reference (confluent-kafka's consumer)",
    "MW_NATIVE_BATCH_POLL": "the native core's consumer always takes a poll's messages in one call",
    "MW_NATIVE_EFFECTS": "the native core always runs user code's effects in Rust; MW_CORE=python runs "
    "the reference",
    "MW_OVERLAP_COMMITS": "a worker always writes a checkpoint while it builds the next batch",
    "MW_FUZZ_SECONDS": "renamed MW_TEST_FUZZ_SECONDS (the fuzz tests' own)",
}


def _settings_classes(root: type[BaseSettings] = BaseSettings) -> Iterator[type[BaseSettings]]:
    for cls in root.__subclasses__():
        yield cls
        yield from _settings_classes(cls)


def variables(cls: type[BaseSettings]) -> dict[str, str]:
    """The ``MW_*`` variables ``cls`` reads: variable -> field name."""
    prefix = str(cls.model_config.get("env_prefix") or "").upper()
    out: dict[str, str] = {}
    for name, info in cls.model_fields.items():
        alias = info.validation_alias
        var = alias.upper() if isinstance(alias, str) else prefix + name.upper()
        if var.startswith(PREFIX) and name != "unsafe":  # (set from MW_UNSAFE_*, no variable)
            out[var] = name
    return out


def known() -> set[str]:
    """Every ``MW_*`` variable of the settings classes defined in this process (the kit's
    are: ``settings.py`` imports ``plumbing.py``, and every settings class of the kit is
    loaded through them)."""
    return {var for cls in _settings_classes() for var in variables(cls)}


def check(environ: Mapping[str, str] | None = None) -> None:
    """``ConfigError`` (one line) for the first ``MW_*`` variable no setting reads."""
    env = os.environ if environ is None else environ
    ours = [var for var in env if var.upper().startswith(PREFIX)]
    unknown = [v for v in ours if not v.upper().startswith(READ_APART)]
    if not unknown:
        return
    names = known()
    for var in sorted(unknown):
        name = var.upper()
        if name in REMOVED:
            raise ConfigError(f"{var}: no longer read ({REMOVED[name]}); remove it")
        if name not in names:
            raise ConfigError(
                f"{var}: no setting of the kit or of this process reads it (misspelt? see the settings "
                "in docs/operating.md; a setting of another service: give it to that service only)"
            )


S = TypeVar("S", bound=BaseSettings)


def load_settings(cls: type[S], **overrides: Any) -> S:
    """``cls`` read from the environment (and ``overrides``); a ``ConfigError`` naming
    every variable that is missing or invalid."""
    try:
        return cls(**overrides)
    except ValidationError as exc:
        raise ConfigError(_explain(exc)) from None


def _explain(exc: ValidationError) -> str:
    """Every invalid variable and why, on one line: ``MW_A: why; MW_B: why``."""
    parts = []
    for err in exc.errors():
        name = "_".join(str(p) for p in err["loc"])
        name = name if name.isupper() else "MW_" + name.upper()  # an alias is its own name
        why = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{name}: {why}")
    return "; ".join(parts)
