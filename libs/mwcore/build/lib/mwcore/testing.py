"""Testing computations in memory: ``Harness`` runs one as the runtime would, without
Kafka or Redis (see ``mwcore.runtime.harness``, on the runtime's in-memory engine)::

    h = Harness(Windower)
    h.send("queries", {"query": "a", ...}, timestamp=1_000, key="a")
    h.advance_watermark(2_000)          # fires event-time timers below 2,000, in order
    assert h.output("window_counts") == [...]

``KeyRunner`` runs keys in batch over archived (encoded) records, as ``mw batch`` does;
``example_value`` makes a valid value of a schema to start a test's input from;
``find_schemas`` finds the project's ``schemas/`` directory.
"""

from mwcore.archive.batch import Encoded, KeyRunner
from mwcore.runtime.harness import Harness, Produced
from mwcore.runtime.in_memory import Failure
from mwcore.serde.avro import find_schemas
from mwcore.serde.examples import example_value

__all__ = ["Encoded", "Failure", "Harness", "KeyRunner", "Produced", "example_value", "find_schemas"]
