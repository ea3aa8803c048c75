"""The same computation in batch: one key's records in timestamp order, timers fired in
timestamp order, the watermark at the end of the data (or infinity) at the end.

The unit of work is one key: its input records (of every input stream, sorted by
timestamp, records before timers at the same time) run through the runtime's own
context, codec and timer queue (``mwcore.runtime.in_memory.InMemoryRunner``). Before each record every
event-time timer of the key below the record's timestamp fires, as it would have
under an exact watermark; after the last record the watermark goes to the end of
time. Record ids are those of the archive, so productions carry the very ids the
streaming pipeline gives them, and a record archived twice (a batch re-sent after a
crash) is processed once, as the streaming runtime's dedup does (a record's copies
share its key, so the check is per key). Wall-time timers do not fire: a replay of the past has
no wall clock. This module needs no Spark; ``mwcore.archive.spark.batch`` distributes keys over
a Spark cluster with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from mwcore.api import ids
from mwcore.api.computation import Computation
from mwcore.runtime.in_memory import InMemoryRunner
from mwcore.serde.avro import SchemaRegistry
from mwcore.serde.framing import Framing

# An archive's history may span both framings (a migration): both are read, the registry's
# ids learnt beforehand (``SchemaRegistry.learn_id``: ``mw batch`` and ``read_archive`` do).
ARCHIVED = Framing("single-object", read_also="confluent")


@dataclass(frozen=True)
class Encoded:
    """A record as archived: its stream, key, timestamp, id and Avro-encoded value."""

    stream: str
    key: str
    timestamp: int
    id: bytes
    value: bytes


class KeyRunner:
    """Runs keys one after another through one computation instance."""

    def __init__(
        self, computation: type[Computation[Any]], registry: SchemaRegistry, end_ms: int | None = None
    ) -> None:
        """``end_ms``: the watermark after the last record (None: the end of time; a
        computation that re-arms a timer at every step then never finishes, so a bounded
        replay passes the end of its data)."""
        self.run = InMemoryRunner(computation, registry, reads=ARCHIVED)
        self.end_ms = end_ms
        self.failures = 0
        self.reasons: Counter[str] = Counter()  # failures by reason (a dead letter's mw-reason)
        self.duplicates = 0

    def run_key(self, records: Iterable[Encoded]) -> Iterator[Encoded]:
        """The key's productions, in the order the computation made them."""
        run = self.run
        seen: set[tuple[str, bytes]] = set()
        for r in sorted(records, key=lambda r: (r.timestamp, r.stream, r.id)):
            if r.id:
                if (r.stream, r.id) in seen:  # archived twice (a re-sent batch): once, as in streaming
                    self.duplicates += 1
                    continue
                seen.add((r.stream, r.id))
            run.advance_watermark(r.timestamp)  # timers strictly below the record fire first
            run.process_encoded(r.stream, r.value, r.timestamp, r.key, r.id or ids.random_id())
        if self.end_ms is None:
            run.finish()
        else:
            run.advance_watermark(self.end_ms)
        run.reset_time()  # timers beyond the end stay unfired; the next key starts at the beginning
        failed = run.take_failures()  # the streaming runtime dead-letters them
        self.failures += len(failed)
        self.reasons.update(getattr(f.error, "reason", type(f.error).__name__) for f in failed)
        for p in run.take_productions():
            yield Encoded(p.topic, (p.key or b"").decode(), p.timestamp, p.id, p.value)
