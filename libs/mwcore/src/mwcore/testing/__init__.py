"""Testing computations in memory: ``Harness`` runs one as the runtime would, without
Kafka or Redis (see ``mwcore.runtime.harness``, on the runtime's in-memory engine)::

    h = Harness(Windower)
    h.send("queries", {"query": "a", ...}, timestamp=1_000, key="a")
    h.advance_watermark(2_000)          # fires event-time timers below 2,000, in order
    assert h.output("window_counts") == [...]

``KeyRunner`` runs keys in batch over archived (encoded) records, as ``mw batch`` does;
``example_value`` makes a valid value of a schema to start a test's input from;
``find_schemas`` finds the project's ``schemas/`` directory.

On real Kafka, Redis and a schema registry in containers: ``mwcore.testing.containers``,
a pytest plugin (``pip install 'mwcore[testing]'``) whose ``mw_run`` fixture runs a
computation as a worker process against them.

The names are imported on first use: the plugin (``mwcore.testing.containers``) loads
into every pytest run where ``mwcore[testing]`` is installed, and importing it must not
load the runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mwcore.archive.batch import Encoded, KeyRunner
    from mwcore.runtime.harness import Harness, Produced
    from mwcore.runtime.in_memory import Failure
    from mwcore.serde.avro import find_schemas
    from mwcore.serde.examples import example_value

_LAZY = {
    "Encoded": "mwcore.archive.batch",
    "KeyRunner": "mwcore.archive.batch",
    "Harness": "mwcore.runtime.harness",
    "Produced": "mwcore.runtime.harness",
    "Failure": "mwcore.runtime.in_memory",
    "find_schemas": "mwcore.serde.avro",
    "example_value": "mwcore.serde.examples",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mwcore.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["Encoded", "Failure", "Harness", "KeyRunner", "Produced", "example_value", "find_schemas"]
