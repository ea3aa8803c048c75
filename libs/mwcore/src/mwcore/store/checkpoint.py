"""The per-interval checkpoint: what one atomic commit writes, and what recovery reads.

A ``Checkpoint`` accumulates the effects of one batch of an interval:

1. state writes per key (encoded at commit time, once per key per batch),
2. timer sets and clears,
3. new pending productions, as batches (one hash field each: the batch's strong
   productions, and any weak ones not acknowledged in time),
4. deletions of pending batches that Kafka has acknowledged in full since the last commit,
5. the record ids newly seen (with their timestamps, for garbage collection),
6. the interval's new input positions (topic/partition -> next offset),
7. optionally, a timestamp below which seen ids are forgotten (the input watermark
   minus a slack: no record that old can be re-sent, semantics section 2),
8. backlog segments of acknowledged productions, stored until a watermark report has
   handed them over, then deleted (see ``outbox.py``).

The store applies all of it in one token-checked script, or none of it. How each part is
written in Redis (the wire format the commit script reads) is ``checkpoint_wire.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mwcore.api.record import Production, TimeDomain
from mwcore.watermarks.report_format import Segment


@dataclass
class Checkpoint:
    state: dict[bytes, bytes | None] = field(default_factory=dict)
    timers: dict[bytes, bytes | None] = field(default_factory=dict)
    productions: list[Production] = field(default_factory=list)  # strong, this batch
    pending: dict[bytes, list[Production]] = field(default_factory=dict)  # set by prepare
    acked: list[bytes] = field(default_factory=list)  # batch keys
    seen: dict[bytes, int] = field(default_factory=dict)
    positions: dict[str, int] = field(default_factory=dict)
    records: int = 0  # records and timer firings it covers (for metrics)
    commit_id: bytes = b""  # unique per checkpoint (makes a retried commit a no-op)
    seen_gc_below: int | None = None  # not part of is_empty: rides along with real commits
    segments: dict[bytes, bytes | None] = field(default_factory=dict)  # key -> encoded, None: delete

    def is_empty(self) -> bool:
        return not (
            self.state
            or self.timers
            or self.productions
            or self.pending
            or self.acked
            or self.seen
            or self.positions
            or self.segments
        )


@dataclass
class Snapshot:
    """An interval as recovery finds it in the store."""

    token: str
    positions: dict[str, int]
    timers: list[TimerEntry]
    pending: dict[bytes, list[Production]]
    seen: list[bytes]
    commits: int
    segments: dict[bytes, list[Segment]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TimerEntry:
    key: str
    tag: str
    timestamp: int
    domain: TimeDomain
    set_id: bytes  # id of the operation that set it; firing ids derive from it
