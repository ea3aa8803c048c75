"""Which core runs the kit's per-commit (and, as it grows, per-record) paths.

``python`` is the pure-Python runtime: the reference, and the default. ``native`` is
the Rust extension built from ``libs/mwcore/native`` (``make bootstrap`` builds it
when cargo is installed), module ``mwcore_native``. Each native function has its
Python reference, and ``libs/mwcore/tests/test_native.py`` holds the two to identical
output. What the native core takes over so far: packing each checkpoint into the
commit script's call (``store/redis_store.py``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Literal

from mwcore.errors import ConfigError

Core = Literal["python", "native"]
CORES: tuple[Core, ...] = ("python", "native")


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
