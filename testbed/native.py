"""The one rule by which a test of the native core skips: the module is not built.

``requires_native`` marks such a test (or a whole module, as ``pytestmark``); pytest's
summary (``-ra``) names the reason. Where Rust's cargo is installed, ``make bootstrap``
builds the module and ``.ci/run`` fails when it is missing, so a broken build cannot
pass unseen there; a machine without Rust runs the pure-Python core and skips these.
``rust`` is the native module, reached through the seam (``mwcore.cores.native``).
"""

from __future__ import annotations

import pytest

from mwcore.cores.native import installed, rust

__all__ = ["requires_native", "rust"]

requires_native = pytest.mark.skipif(
    not installed(), reason="the native core is not built (make bootstrap builds it where cargo is)"
)
