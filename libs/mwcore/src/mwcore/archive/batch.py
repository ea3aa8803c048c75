"""The same computation in batch: one key's records in timestamp order, timers fired in
timestamp order, the watermark at the end of the data (or infinity) at the end.

The unit of work is one key: its input records (of every input stream, sorted by
timestamp, records before timers at the same time) run through the runtime's own
context, codec and timer queue (``mwcore.runtime.harness.Harness``). Before each record every
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

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from mwcore.api.computation import Computation
from mwcore.runtime.harness import Harness
from mwcore.serde.avro import SchemaRegistry


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
        self, computation: type[Computation], registry: SchemaRegistry, end_ms: int | None = None
    ) -> None:
        """``end_ms``: the watermark after the last record (None: the end of time; a
        computation that re-arms a timer at every step then never finishes, so a bounded
        replay passes the end of its data)."""
        self.h = Harness(computation, registry, raise_errors=False)
        self.end_ms = end_ms
        self.failures = 0
        self.duplicates = 0

    def run_key(self, records: Iterable[Encoded]) -> Iterator[Encoded]:
        """The key's productions, in the order the computation made them."""
        h = self.h
        seen: set[tuple[str, bytes]] = set()
        for r in sorted(records, key=lambda r: (r.timestamp, r.stream, r.id)):
            if r.id:
                if (r.stream, r.id) in seen:  # archived twice (a re-sent batch): once, as in streaming
                    self.duplicates += 1
                    continue
                seen.add((r.stream, r.id))
            h.advance_watermark(r.timestamp)  # timers strictly below the record fire first
            h.send_encoded(r.stream, r.value, r.timestamp, key=r.key, record_id=r.id or None)
        if self.end_ms is None:
            h.finish()
        else:
            h.advance_watermark(self.end_ms)
        h.reset_time()  # timers beyond the end stay unfired; the next key starts at the beginning
        self.failures += len(h.take_failures())  # the streaming runtime dead-letters them
        for p in h.take_productions():
            yield Encoded(p.topic, (p.key or b"").decode(), p.timestamp, p.id, p.value)


def run_batch(
    computation: type[Computation],
    registry: SchemaRegistry,
    records: Iterable[Encoded],
    end_ms: int | None = None,
) -> Iterator[Encoded]:
    """Run ``computation`` over records of any keys (grouped here, in memory)."""
    by_key: dict[str, list[Encoded]] = {}
    for r in records:
        by_key.setdefault(r.key, []).append(r)
    runner = KeyRunner(computation, registry, end_ms)
    for key in sorted(by_key):
        yield from runner.run_key(by_key[key])
