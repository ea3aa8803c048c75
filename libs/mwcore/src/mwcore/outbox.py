"""Productions of one interval between their checkpoint and Kafka's acknowledgement.

Strong productions are checkpointed as one *batch* (one Redis hash field holding all
of a commit's productions), sent after the commit, and the batch is deleted by a
later checkpoint once Kafka has acknowledged every production in it. A batch object
is itself the delivery callback of its messages, so acknowledgement costs no
allocation per message. A batch with a failed delivery is sent again whole (its ids
make the duplicates harmless downstream).

Weak productions are sent before the checkpoint; those still unacknowledged when
the checkpoint is written go into it as a batch too (paper, figure 11).
"""

from __future__ import annotations

import time
from typing import Any

from mwcore.record import Production
from mwcore.watermark import MAX_WATERMARK
from mwcore.watermarks.reports import Segment


class OutboxBatch:
    __slots__ = (
        "checkpointed",
        "counts",
        "ends",
        "failed",
        "key",
        "min_ts",
        "outbox",
        "productions",
        "remaining",
    )

    def __init__(self, outbox: Outbox, key: bytes, productions: list[Production], checkpointed: bool):
        self.outbox = outbox
        self.key = key
        self.productions = productions
        self.remaining = len(productions)
        self.failed = False
        self.checkpointed = checkpointed
        self.min_ts = min([p.timestamp for p in productions], default=MAX_WATERMARK)
        # (topic, partition) -> offset after the last acknowledged message, and how many
        self.ends: dict[tuple[str, int], int] = {}
        self.counts: dict[tuple[str, int], int] = {}

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed = True
        else:
            k = (msg.topic(), msg.partition())
            end = msg.offset() + 1
            if end > self.ends.get(k, 0):
                self.ends[k] = end
            self.counts[k] = self.counts.get(k, 0) + 1
        self.remaining -= 1
        if self.remaining == 0:
            self.outbox._settled(self)


class Outbox:
    def __init__(self, recovered: dict[bytes, list[Production]] | None = None) -> None:
        self.pending: dict[bytes, OutboxBatch] = {}  # checkpointed, not fully acknowledged
        self.weak: list[OutboxBatch] = []  # sent before any checkpoint, not fully acknowledged
        self.to_send: list[OutboxBatch] = []
        self.acked: list[bytes] = []  # batch keys to delete in the next checkpoint
        # Acknowledged in full, not yet handed to the backlog by a watermark report: they
        # still count as the interval's oldest work, and may not be deleted before then.
        self.unreported: list[OutboxBatch] = []
        self.first_acked_at = 0.0
        for key, productions in (recovered or {}).items():
            batch = OutboxBatch(self, key, productions, checkpointed=True)
            self.pending[key] = batch
            self.to_send.append(batch)

    def _settled(self, batch: OutboxBatch) -> None:
        if batch.failed:
            batch.failed = False
            batch.remaining = len(batch.productions)
            self.to_send.append(batch)
            return
        if batch.checkpointed:
            self.pending.pop(batch.key, None)
        else:
            self.weak.remove(batch)
        self.unreported.append(batch)

    def handed(self) -> tuple[list[OutboxBatch], list[Segment]]:
        """The acknowledged batches a report hands to the backlog, as segments (one per
        output partition; the oldest timestamp is the batch's, a safe lower bound)."""
        batches, self.unreported = self.unreported, []
        merged: dict[tuple[str, int], list[int]] = {}
        for b in batches:
            for k, end in b.ends.items():
                seg = merged.get(k)
                if seg is None:
                    merged[k] = [end, b.min_ts, b.counts[k]]
                else:
                    seg[0] = max(seg[0], end)
                    seg[1] = min(seg[1], b.min_ts)
                    seg[2] += b.counts[k]
        segments = [Segment(t, p, end, ts, n) for (t, p), (end, ts, n) in merged.items()]
        return batches, segments

    def reported(self, batches: list[OutboxBatch]) -> None:
        """A report handing ``batches`` to the backlog is written: their checkpointed
        copies may now be deleted."""
        for batch in batches:
            if batch.checkpointed:
                if not self.acked:
                    self.first_acked_at = time.monotonic()
                self.acked.append(batch.key)

    def unreport(self, batches: list[OutboxBatch]) -> None:
        """The report was not written: hand them over in the next one."""
        self.unreported[:0] = batches

    def oldest(self) -> int:
        """Oldest timestamp among productions not yet handed to the backlog."""
        return min(
            [b.min_ts for b in self.pending.values()]
            + [b.min_ts for b in self.weak]
            + [b.min_ts for b in self.unreported],
            default=MAX_WATERMARK,
        )

    def committed(self, key: bytes, productions: list[Production]) -> None:
        """A checkpoint holding ``productions`` under ``key`` is durable: send them."""
        batch = OutboxBatch(self, key, productions, checkpointed=True)
        self.pending[key] = batch
        self.to_send.append(batch)

    def send_weak(self, productions: list[Production]) -> None:
        batch = OutboxBatch(self, b"", productions, checkpointed=False)
        self.weak.append(batch)
        self.to_send.append(batch)

    def weak_for_checkpoint(self, make_key: Any) -> dict[bytes, list[Production]]:
        """Name each unacknowledged weak batch, for the checkpoint being prepared."""
        out: dict[bytes, list[Production]] = {}
        for batch in self.weak:
            batch.key = make_key()
            out[batch.key] = batch.productions
        return out

    def weak_committed(self) -> None:
        """The checkpoint holding the named weak batches is durable."""
        for batch in self.weak:
            batch.checkpointed = True
            self.pending[batch.key] = batch
        self.weak = []

    def take_to_send(self) -> list[OutboxBatch]:
        out, self.to_send = self.to_send, []
        return out

    def take_acked(self, n: int) -> None:
        del self.acked[:n]
