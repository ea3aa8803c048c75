"""Productions of one interval between their checkpoint and Kafka's acknowledgement.

Strong productions are checkpointed as one *batch* (one Redis hash field holding all
of a commit's productions), sent after the commit (once the commit witness covers it:
see ``witness.py``), and the batch is deleted by a later checkpoint once Kafka has
acknowledged every production in it. A batch object is itself the delivery callback
of its messages, so acknowledgement costs no allocation per message. A batch with a
failed delivery is sent again whole (its ids make the duplicates harmless downstream).

Weak productions are sent before the checkpoint; those still unacknowledged when
the checkpoint is written go into it as a batch too (paper, figure 11).

A production the broker refuses for good (too large, a timestamp out of its window)
would fail every time its batch is sent again. The broker refuses a whole request for
one such record, and a delivery report names only the topic, key and value, so the
productions a refusal may concern are sent once more each alone (``isolate``): one
refused alone is replaced by its dead letter, and the batch goes again whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mwcore.api.clock import MAX_WATERMARK
from mwcore.api.record import Production
from mwcore.transport.producer import refused_for_good
from mwcore.watermarks.report_format import Segment

# A production the broker refuses for good -> what to send instead (a dead letter)
Refuse = Callable[[Production, str, str], Production]
# Send one production in a request of its own: the delivery error, or None
SendAlone = Callable[[Production], Any]


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
        "refusals",
        "remaining",
    )

    def __init__(self, outbox: Outbox, key: bytes, productions: list[Production], checkpointed: bool):
        self.outbox = outbox
        self.key = key
        self.productions = productions
        self.remaining = len(productions)
        self.failed = False
        self.refusals: list[tuple[str, bytes | None, bytes | None]] | None = None  # refused for good
        self.checkpointed = checkpointed
        self.min_ts = min([p.timestamp for p in productions], default=MAX_WATERMARK)
        # (topic, partition) -> offset after the last acknowledged message, and how many
        self.ends: dict[tuple[str, int], int] = {}
        self.counts: dict[tuple[str, int], int] = {}

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed = True  # sent again whole (its other productions are dropped as seen)
            if msg is not None and refused_for_good(err) is not None:
                if self.refusals is None:
                    self.refusals = []
                self.refusals.append((msg.topic(), msg.key(), msg.value()))
        else:
            k = (msg.topic(), msg.partition())
            end = msg.offset() + 1
            if end > self.ends.get(k, 0):
                self.ends[k] = end
            self.counts[k] = self.counts.get(k, 0) + 1
        self.remaining -= 1
        if self.remaining == 0:
            self.outbox._settled(self)

    def settle_all(
        self,
        failures: list[tuple[Any, str, bytes | None, bytes | None]],
        ends: dict[tuple[str, int], int],
        counts: dict[tuple[str, int], int],
    ) -> None:
        """Every production's report at once (the native core's producer tallies them
        per batch): what one call per production (``__call__``) leaves, in one."""
        for err, topic, key, value in failures:
            self.failed = True
            if refused_for_good(err) is not None:
                if self.refusals is None:
                    self.refusals = []
                self.refusals.append((topic, key, value))
        for k, end in ends.items():
            if end > self.ends.get(k, 0):
                self.ends[k] = end
        for k, n in counts.items():
            self.counts[k] = self.counts.get(k, 0) + n
        self.remaining = 0
        self.outbox._settled(self)


@dataclass(frozen=True, slots=True)
class OutboxCommit:
    """What one checkpoint carries for the outbox, from ``Outbox.for_checkpoint`` to
    ``Outbox.checkpointed``."""

    deleted: list[bytes]  # pending batches acknowledged in full: their keys, deleted
    settled: int  # how many acknowledged batches (the first of ``acked``) it settles
    segments_key: bytes | None  # where it stores their segments (None: none)
    segments: list[Segment]
    handed: list[bytes]  # stored segments a report handed over: their keys, deleted
    weak: list[OutboxBatch]  # weak batches not acknowledged yet, checkpointed as pending

    def pending(self) -> dict[bytes, list[Production]]:
        """The weak batches, as the checkpoint's pending section stores them."""
        return {b.key: b.productions for b in self.weak}


class Outbox:
    """Productions from checkpoint to Kafka's acknowledgement, and their hand-over to
    the watermark authority.

    1. A batch is acknowledged in full: it joins ``acked``.
    2. The next checkpoint deletes the acknowledged batches' pending copies and, in the
       same commit, stores their *segments* (per output partition: offsets up to, oldest
       timestamp, count) under a new key. An acknowledged batch is never sent again,
       so no consumer can see a re-sent copy after it forgot the ids (seen-id GC).
    3. A watermark report hands the stored segments to the backlog; until then they
       count as the interval's oldest work (and a new owner recovers and reports them).
    4. Once the report is written, the next checkpoint deletes the stored segments.
    """

    def __init__(
        self,
        recovered: dict[bytes, list[Production]] | None = None,
        segments: dict[bytes, list[Segment]] | None = None,
        *,
        recovered_commit: int = 0,
        gated: bool = False,
        refuse: Refuse | None = None,
    ) -> None:
        self._refuse = refuse
        self.pending: dict[bytes, OutboxBatch] = {}  # checkpointed, not fully acknowledged
        self.weak: list[OutboxBatch] = []  # sent before any checkpoint, not fully acknowledged
        self.to_send: list[OutboxBatch] = []
        self.to_isolate: list[OutboxBatch] = []  # failed, some production refused for good
        # gated: a checkpointed batch waits here, with its commit's count, until the
        # commit witness covers that count (``witnessed_commits``)
        self.gated = gated
        self.held: list[tuple[int, OutboxBatch]] = []
        self.witnessed_commits = -1  # the highest commit count the witness covers
        self.acked: list[OutboxBatch] = []  # acknowledged, segments not yet checkpointed
        self.stored: dict[bytes, list[Segment]] = dict(segments or {})  # checkpointed, unreported
        self.reported_keys: list[bytes] = []  # reported: delete in the next checkpoint
        self.first_acked_at = 0.0
        for key, productions in (recovered or {}).items():
            batch = OutboxBatch(self, key, productions, checkpointed=True)
            self.pending[key] = batch
            self._ready(recovered_commit, batch)

    def _ready(self, commit: int, batch: OutboxBatch) -> None:
        if self.gated and commit > self.witnessed_commits:
            self.held.append((commit, batch))
        else:
            self.to_send.append(batch)

    def witness(self, commits: int) -> None:
        """The commit witness covers ``commits``: release the batches it covers."""
        self.witnessed_commits = max(self.witnessed_commits, commits)
        if self.held:
            still = []
            for commit, batch in self.held:
                if commit <= self.witnessed_commits:
                    self.to_send.append(batch)
                else:
                    still.append((commit, batch))
            self.held = still

    def isolate(self, batch: OutboxBatch, send_alone: SendAlone) -> None:
        """Send each production of ``batch`` that a refusal for good may concern (same
        topic, key and value) alone; one the broker refuses alone is replaced by what
        ``refuse`` makes of it (its dead letter). Then the batch goes again whole."""
        suspects = set(batch.refusals or ())
        batch.refusals = None
        for i, p in enumerate(batch.productions):
            if (p.topic, p.key, p.value) not in suspects:
                continue
            err = send_alone(p)
            why = refused_for_good(err) if err is not None else None
            if why is not None and self._refuse is not None:
                batch.productions[i] = self._refuse(p, why, str(err))
        self.to_send.append(batch)

    def take_to_isolate(self) -> list[OutboxBatch]:
        out, self.to_isolate = self.to_isolate, []
        return out

    def _settled(self, batch: OutboxBatch) -> None:
        if batch.failed:
            batch.failed = False
            batch.remaining = len(batch.productions)
            (self.to_isolate if batch.refusals else self.to_send).append(batch)
            return
        if batch.checkpointed:
            self.pending.pop(batch.key, None)
        else:
            self.weak.remove(batch)
        if not self.acked and not self.reported_keys:
            self.first_acked_at = time.monotonic()
        self.acked.append(batch)

    @property
    def has_cleanup(self) -> bool:
        """Something for the next checkpoint even without new records."""
        return bool(self.acked or self.reported_keys)

    def for_checkpoint(self, new_key: Callable[[], bytes], weak: bool = True) -> OutboxCommit:
        """What the next checkpoint carries for the outbox (``checkpointed`` once it is
        durable): the deletion of fully acknowledged batches, their segments under a new
        key, the deletion of segments a report handed over, and (``weak``) every weak
        batch not acknowledged yet, each under a new key."""
        segments = _segments(self.acked)
        for batch in self.weak if weak else ():
            batch.key = new_key()
        return OutboxCommit(
            deleted=[b.key for b in self.acked if b.checkpointed],
            settled=len(self.acked),
            segments_key=new_key() if segments else None,
            segments=segments,
            handed=list(self.reported_keys),
            weak=list(self.weak) if weak else [],
        )

    def checkpointed(self, commit: OutboxCommit) -> None:
        """The checkpoint made from ``commit`` is durable."""
        del self.acked[: commit.settled]
        if commit.segments_key is not None:
            self.stored[commit.segments_key] = commit.segments
        del self.reported_keys[: len(commit.handed)]
        for batch in commit.weak:
            batch.checkpointed = True  # acknowledged already: the next checkpoint deletes it
            if batch in self.weak:
                self.weak.remove(batch)
                self.pending[batch.key] = batch

    def handed(self) -> tuple[list[bytes], list[Segment]]:
        """What a report hands to the backlog: every stored segment (merged)."""
        keys = list(self.stored)
        merged: dict[tuple[str, int], Segment] = {}
        for segs in self.stored.values():
            for seg in segs:
                k = (seg.topic, seg.partition)
                merged[k] = seg if k not in merged else _merge(merged[k], seg)
        return keys, list(merged.values())

    def reported(self, keys: list[bytes]) -> None:
        """The report handing ``keys`` over is written: delete them next checkpoint."""
        for key in keys:
            if self.stored.pop(key, None) is not None:
                if not self.acked and not self.reported_keys:
                    self.first_acked_at = time.monotonic()
                self.reported_keys.append(key)

    def oldest(self, handing_over: bool = False) -> int:
        """Oldest timestamp among productions not yet handed to the backlog (with
        ``handing_over``: not counting the stored segments a report is handing over)."""
        stored = [] if handing_over else [s.min_ts for segs in self.stored.values() for s in segs]
        return min(
            [b.min_ts for b in self.pending.values()]
            + [b.min_ts for b in self.weak]
            + [b.min_ts for b in self.acked]
            + stored,
            default=MAX_WATERMARK,
        )

    def committed(self, key: bytes, productions: list[Production], commit: int = 0) -> None:
        """Checkpoint number ``commit``, holding ``productions`` under ``key``, is
        durable: send them (when gated: once the witness covers it)."""
        batch = OutboxBatch(self, key, productions, checkpointed=True)
        self.pending[key] = batch
        self._ready(commit, batch)

    def send_weak(self, productions: list[Production]) -> None:
        batch = OutboxBatch(self, b"", productions, checkpointed=False)
        self.weak.append(batch)
        self.to_send.append(batch)

    def take_to_send(self) -> list[OutboxBatch]:
        out, self.to_send = self.to_send, []
        return out

    @property
    def has_unsent(self) -> bool:
        """A checkpointed batch not sent yet: held for the witness, released, or failed."""
        return bool(self.held or self.to_send or self.to_isolate)

    def take_unsent(self) -> list[OutboxBatch]:
        """Every batch not sent yet, in checkpoint order (a transaction sends them with
        the witness that covers them: ``runtime/transactional.py``)."""
        out = [b for _, b in self.held] + self.to_isolate + self.to_send
        self.held, self.to_isolate, self.to_send = [], [], []
        return out

    def put_back(self, batches: list[OutboxBatch]) -> None:
        """Batches of a transaction that was aborted: sent again with the next one."""
        self.to_send = batches + self.to_send


def _merge(a: Segment, b: Segment) -> Segment:
    return Segment(a.topic, a.partition, max(a.end, b.end), min(a.min_ts, b.min_ts), a.count + b.count)


def _segments(batches: list[OutboxBatch]) -> list[Segment]:
    """One segment per output partition the batches wrote to; the oldest timestamp is
    each batch's own (a safe lower bound for every partition it wrote)."""
    merged: dict[tuple[str, int], Segment] = {}
    for b in batches:
        for (topic, part), end in b.ends.items():
            seg = Segment(topic, part, end, b.min_ts, b.counts[(topic, part)])
            k = (topic, part)
            merged[k] = seg if k not in merged else _merge(merged[k], seg)
    return list(merged.values())
