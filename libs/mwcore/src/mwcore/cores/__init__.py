"""The seam between the kit and its two cores: the one place that knows which runs.

A core hands out every part of the per-record and per-commit paths that has two
implementations (``mwcore.runtime.parts.Core``: the dedup filter, the timer queue, the
envelope's reader and the screener, the applier of user code's effects, the Avro
codecs, the group consumer, the sender, the checkpoint's packer). A process chooses
its core once, at its edge, from ``MW_CORE`` (``process.wiring``), and hands it down.

- ``python`` (``cores/python.py``) is the pure-Python runtime: the reference, and the
  default where the native core is not installed.
- ``native`` (``cores/native/``) is the Rust extension built from ``libs/mwcore/native``
  (``make bootstrap`` builds it when cargo is installed; ``make wheel`` packs it),
  module ``mwcore_native``: the default wherever it is installed. Only
  ``mwcore.cores.native`` imports it (an import contract in ``pyproject.toml``, and
  ``libs/mwcore/tests/test_seam.py``), and no module outside this package compares a
  core's name.

Tests build both side by side (``core("python")``, ``core("native")``) for the
differential tests, and ``mixed`` where they need the native core with some parts of the
reference.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Literal, get_args

from mwcore.errors import ConfigError

if TYPE_CHECKING:  # (the runtime, imported only by the cores that need it)
    from mwcore.runtime.parts import Core

CoreName = Literal["python", "native"]
CORES: tuple[CoreName, ...] = get_args(CoreName)


def installed() -> bool:
    """Whether the native core is installed (importable)."""
    from mwcore.cores import native

    return native.installed()


def default_name() -> CoreName:
    """``MW_CORE`` unset: the native core where it is installed, else the Python one."""
    return "native" if installed() else "python"


def require(name: CoreName) -> None:
    """``ConfigError`` (one line: what to do) if core ``name`` cannot run here."""
    if name == "native":
        from mwcore.cores import native

        native.require()


@cache
def core(name: CoreName) -> Core:
    """The core called ``name`` (``ConfigError`` if it is not installed)."""
    if name == "python":
        from mwcore.cores.python import PythonCore

        return PythonCore()
    if name == "native":
        from mwcore.cores.native import NativeCore

        return NativeCore()
    raise ConfigError(f"MW_CORE={name!r}: no such core (known: {', '.join(CORES)})")


def mixed(base: Core, *, effects: Core | None = None, intake: Core | None = None) -> Core:
    """``base`` with the parts of another core where named: ``effects`` (the timer queue
    and the applier of user code's effects), ``intake`` (the consumer, the envelope's
    reader and the screener, which read the consumer's messages). For tests and
    benchmarks of one part on its own."""
    from mwcore.cores.mixed import Mixed

    return Mixed(base, effects or base, intake or base)


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a panic of the native core outside its per-record code (a bug:
    the process stops with one line, ``process/bootstrap.py``)."""
    from mwcore.cores import native

    return native.is_panic(exc)


def panic_on_key(key: str) -> None:
    """Test plumbing (``MW_PANIC_KEY``): the native core panics in its per-record code on
    the records of ``key`` (``ConfigError`` where it is not installed)."""
    from mwcore.cores import native

    native.panic_on_key(key)
