"""Which core runs the kit's per-record and per-commit paths.

``native`` is the Rust extension built from ``libs/mwcore/native`` (``make bootstrap``
builds it when cargo is installed; ``make wheel`` packs it), module ``mwcore_native``:
the default wherever it is installed. ``python`` is the pure-Python runtime: the
reference, and the default where the native core is not installed. Each native part
has its Python reference, and differential tests hold the two to identical output
(``libs/mwcore/tests/test_native.py``, ``tests/test_differential.py``).

What the native core does: the worker's productions on librdkafka, reported per batch
(``transport/native_producer.py``); Avro decoding of inputs and encoding of productions
(``runtime/native_codecs.py``); the dedup filter (``runtime/dedup.py``); packing each
checkpoint into the commit script's call (``store/redis_store.py``); user code's
context, its effects and the timer queue (``runtime/effects.py``; ``MW_NATIVE_EFFECTS=0``
turns them off); the group consumer and the record envelope (``MW_NATIVE_CONSUMER=0``
turns them off).
"""

from __future__ import annotations

from types import ModuleType
from typing import Literal

from mwcore.errors import ConfigError

Core = Literal["python", "native"]
CORES: tuple[Core, ...] = ("python", "native")


def installed() -> bool:
    """Whether the native core is installed (importable)."""
    try:
        import mwcore_native  # noqa: F401
    except ImportError:
        return False
    return True


def default_core() -> Core:
    """``MW_CORE`` unset: the native core where it is installed, else the Python one."""
    return "native" if installed() else "python"


def native() -> ModuleType:
    """The native module; ``ConfigError`` (one line: what to do) if it is not built."""
    try:
        import mwcore_native
    except ImportError as exc:
        raise ConfigError(
            "MW_CORE=native: the native core is not installed (build it with make bootstrap, "
            f"which needs Rust's cargo: https://rustup.rs), or set MW_CORE=python ({exc})"
        ) from None
    module: ModuleType = mwcore_native
    return module
