"""One owned key interval: its soft state and the batch being built.

Soft state (decoded per-key state, timer queue, seen-id filter, positions, productions
in flight) is valid only while the interval's token is current (semantics I-5); on
``FencedError`` the worker drops the whole object.

A batch goes: ``process`` (records) and ``fire_timers`` add effects (through the
``Applier``); ``prepare`` turns them into a ``PreparedCommit`` and opens the next batch;
the worker commits its checkpoint; ``committed`` then queues the productions to send
(``take_to_send``). Acknowledged productions are deleted in a later checkpoint;
``report`` builds the watermark report of the committed state (``reports.py``).

Between ``prepare`` and ``committed`` the checkpoint is *in flight* (``in_flight``), and
with overlapping commits (the default: ``Tuning.overlap_commits``) the next batch is
built meanwhile.
What it reads of the batch before stays right: its record ids count as seen (the next
batch's seen ids start with them), a key's state missing from the cache is read from
the checkpoint in flight before the store (``_load``), and a report shows the last
durable checkpoint, holding back for what the batches after it may still produce
(``_after_durable``).
If the commit fails, the worker drops the interval, next batch and all.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from mwcore.api import ids
from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.api.record import Production, TimeDomain
from mwcore.runtime import dead_letters
from mwcore.runtime.dedup import SeenIds
from mwcore.runtime.intake import Intake, OpenBatch
from mwcore.runtime.interval_deps import IntervalDeps
from mwcore.runtime.outbox import Outbox, OutboxBatch, OutboxCommit
from mwcore.runtime.reports import ReportDraft, Reports
from mwcore.runtime.state_cache import StateCache
from mwcore.store.checkpoint import Checkpoint, Snapshot, TimerEntry
from mwcore.store.checkpoint_wire import position_field
from mwcore.store.interface import IntervalId
from mwcore.transport.message import Message
from mwcore.watermarks.report_format import encode_segments


@dataclass(frozen=True, slots=True)
class PreparedCommit:
    """A batch made into a checkpoint, between ``Interval.prepare`` and
    ``Interval.committed`` (the store's commit in between)."""

    checkpoint: Checkpoint
    outbox: OutboxCommit  # what the checkpoint does to the outbox
    opened_at: float | None = None  # when its batch opened (monotonic)
    timestamps: list[int] = field(default_factory=list)  # its records' timestamps and
    arrivals: list[int] = field(default_factory=list)  # arrivals, when latency is recorded
    oldest_timer: int = MAX_WATERMARK  # the oldest pending timer or hold when it was made
    oldest_production: int = MAX_WATERMARK  # the oldest of its batch's productions


class Interval:
    def __init__(
        self,
        iid: IntervalId,
        snapshot: Snapshot,
        deps: IntervalDeps,
        careful_until: dict[str, int] | None = None,
    ) -> None:
        """``careful_until``: a batch that reached these positions was dropped
        (``RedoCareful``): each call's state is encoded at once until a checkpoint
        passes them, and for at least ``deps.careful_s`` (``effects.py``)."""
        self.id = iid
        self.token = snapshot.token
        self.deps = deps
        self.comp = deps.computation
        self.positions: dict[str, int] = dict(snapshot.positions)
        self.committed_positions: dict[str, int] = dict(snapshot.positions)
        self.commits = snapshot.commits
        config, core = deps.config, deps.core
        self.timers = core.timer_queue()
        for entry in snapshot.timers:
            self.timers.set(entry)
        self.cache = StateCache(deps.codec, self._load, config.max_cache_keys, config.unsafe)
        if deps.whole_state_bytes > 0:
            stored = deps.store.whole_state(iid, config.max_cache_keys, deps.whole_state_bytes)
            if stored is not None:
                self.cache.know(stored)
        self.applier = core.applier(
            self.comp,
            self.cache,
            self.timers,
            deps.encoders,
            deps.clock,
            deps.counters,
            config.unsafe,
            careful=careful_until is not None,
        )
        self.careful_until = careful_until
        self._careful_since = time.monotonic()
        self.seen = SeenIds(snapshot.seen, self._lookup_seen, self._all_seen, deps.counters, core.filter)
        self.intake = Intake(
            name=str(iid),
            inputs=deps.inputs,
            reader=core.reader(config.signer),
            screener=core.screener(),
            seen=self.seen,
            cache=self.cache,
            applier=self.applier,
            dead_letter_topic=deps.dead_letter_topic,
            late_topic=deps.late_topic,
            exactly_once=deps.exactly_once,
            faults=deps.faults,
            record_latency=deps.record_latency,
            clock=deps.clock,
            on_error=deps.on_error,
            controls=config.unsafe,
        )
        # Pending batches of the snapshot are sent again first.
        self.outbox = Outbox(
            snapshot.pending,
            snapshot.segments,
            recovered_commit=snapshot.commits,
            gated=config.witness_gate,
            refuse=self._refused,
        )
        self.reports = Reports(iid.index, self.token, self.outbox, self.timers)
        self._batch_seq = 0
        self.in_flight: PreparedCommit | None = None  # prepared, not yet durable
        self.durable_oldest_timer = MAX_WATERMARK  # ``oldest_timer`` of the last durable one
        self._committed_here = False  # a checkpoint of this owner's is durable
        self.watermark = MIN_WATERMARK  # the input watermark timers last fired on
        self.seen_gc_done = MIN_WATERMARK
        self._reset_batch()

    # -- the store, for the state cache and dedup --------------------------------------

    def _load(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The keys' state: the checkpoint in flight's where it has it, else the store's."""
        flight = self.in_flight
        if flight is None:
            return self.deps.store.load_state(self.id, keys)
        written = flight.checkpoint.state
        missing = [k for k in keys if k not in written]
        stored = iter(self.deps.store.load_state(self.id, missing) if missing else ())
        return [written[k] if k in written else next(stored) for k in keys]

    def _lookup_seen(self, rids: list[bytes]) -> list[bool]:
        return self.deps.store.seen(self.id, rids)

    def _all_seen(self) -> list[bytes]:
        return self.deps.store.seen_ids(self.id)

    # -- batch bookkeeping -------------------------------------------------------------

    def _reset_batch(self, seen: set[bytes] | None = None) -> None:
        self.open = OpenBatch(seen=seen if seen is not None else set())
        self.batch = self.open.checkpoint  # what the batch will commit

    @property
    def opened_at(self) -> float | None:
        """When the open batch got its first record or firing (None: no batch open)."""
        return self.open.opened_at

    def due(self, now: float, max_records: int, max_delay_s: float) -> bool:
        """Whether the batch should be committed now (full, or open for ``max_delay_s``;
        or acknowledgements waiting that long for their deletion, unless a checkpoint in
        flight may carry it: the worker would wait for it for nothing)."""
        if self.open.records >= max_records:
            return True
        started = self.open.opened_at
        if started is None:
            if self.in_flight is not None:
                return False
            outbox = self.outbox
            return outbox.has_cleanup and now - outbox.first_acked_at >= max_delay_s
        return now - started >= max_delay_s

    def idle(self) -> bool:
        """No batch open or in flight: the soft state is exactly the last committed
        checkpoint."""
        return (
            self.in_flight is None
            and self.open.opened_at is None
            and self.batch.is_empty()
            and not self.applier.dirty
        )

    def reportable(self) -> bool:
        """A watermark report of the last durable checkpoint may be made now: when idle;
        with overlapping commits, also once this owner made one durable (its first batch
        holds where newly assigned partitions start), whatever batches follow it:
        ``report`` counts what they may still produce (``_after_durable``)."""
        return self.idle() or (self.deps.tuning.overlap_commits and self._committed_here)

    @property
    def has_cleanup(self) -> bool:
        """Acknowledged productions or reported segments wait for a checkpoint."""
        return self.outbox.has_cleanup

    @property
    def has_acked(self) -> bool:
        """Productions acknowledged in full whose deletion is not committed yet."""
        return bool(self.outbox.acked)

    def open_production_ids(self) -> list[bytes]:
        """Ids of the strong productions in the open batch."""
        return [p.id for p in self.batch.productions]

    def start_at(self, topic: str, partition: int, offset: int) -> None:
        """Read ``topic``'s partition from ``offset`` (its end, for ``start_from="latest"``),
        made durable by the next checkpoint."""
        fld = position_field(topic, partition)
        self.positions[fld] = offset
        self.batch.positions[fld] = offset
        self.open.touch()

    def position(self, topic: str, partition: int) -> int | None:
        """Where the partition resumes (the checkpoint's position), if it was ever read."""
        return self.positions.get(position_field(topic, partition))

    def committed_position(self, topic: str, partition: int) -> int | None:
        return self.committed_positions.get(position_field(topic, partition))

    def _new_batch_key(self) -> bytes:
        self._batch_seq += 1
        return ids.derive(self.token.encode(), self._batch_seq)

    # -- watermark reports (``reports.py``) -------------------------------------------

    def is_witnessed(self) -> bool:
        """The commit witness covers the last checkpoint: a watermark report may show it."""
        return self.reports.witnessed(self.commits)

    def report(self, now_ms: int) -> ReportDraft | None:
        """The watermark report of the committed state (call only when ``reportable()``),
        or None while it is held for the commit witness (``Reports.draft``)."""
        return self.reports.draft(self.commits, self.committed_positions, now_ms, self._after_durable())

    def _after_durable(self) -> int:
        """What the batches after the last durable checkpoint may still produce at, that
        the queue and the outbox do not show: the timers queued when that checkpoint was
        made (a later batch may have fired them), and the productions no durable
        checkpoint holds yet (the one in flight's, the open batch's, weak ones not yet
        handed to the outbox: a timer set and fired after it, below its records' times)."""
        oldest = self.durable_oldest_timer
        flight = self.in_flight
        if flight is not None and flight.oldest_production < oldest:
            oldest = flight.oldest_production
        for p in self.batch.productions:
            if p.timestamp < oldest:
                oldest = p.timestamp
        for p in self.applier.weak or ():
            if p.timestamp < oldest:
                oldest = p.timestamp
        return oldest

    # -- records -----------------------------------------------------------------------

    def process(self, messages: Sequence[Message]) -> None:
        """Deduplicate, decode and run user code on messages of this interval, in order
        (``intake.py``)."""
        self.intake.process(messages, self.open, self.positions)

    # -- timers --------------------------------------------------------------------------

    def _dead_letter_timer(self, entry: TimerEntry, firing_id: bytes, exc: Exception) -> None:
        self.deps.counters.dead_letters += 1
        if not self.deps.config.unsafe.drop_dead_letters:
            dead = dead_letters.timer_dead_letter(self.deps.dead_letter_topic, entry, firing_id, exc)
            self.batch.productions.append(dead)

    def fire_timers(self, watermark: int, now_ms: int, limit: int = 10_000) -> int:
        """Fire event timers below the input watermark and wall timers up to now.

        At most ``limit`` firings per call: a timer that re-arms itself under a big
        watermark jump would otherwise keep one batch open forever.
        """
        if watermark > self.watermark:
            self.watermark = watermark
        fired = self._fire(TimeDomain.EVENT, watermark, limit)
        fired += self._fire(TimeDomain.WALL, now_ms + 1, limit - fired)
        return fired

    def _fire(self, domain: TimeDomain, limit_ts: int, max_firings: int) -> int:
        oldest = self.timers.oldest(domain)
        if max_firings <= 0 or oldest is None or oldest >= limit_ts:
            return 0
        self.open.touch()
        faults = self.deps.faults
        before = (
            (lambda: faults.point("in_timer", lambda: {"interval": str(self.id)})) if faults.enabled else None
        )
        fired = self.applier.fire(domain, limit_ts, self.batch, self._dead_letter_timer, max_firings, before)
        self.open.records += fired
        return fired

    # -- commit --------------------------------------------------------------------------

    def prepare(self) -> PreparedCommit | None:
        """The checkpoint of the open batch, or None if there is nothing to commit (the
        batch is then closed). Call once per batch, then ``committed``. ``RedoCareful``:
        a key's state cannot be encoded, the batch must be redone."""
        cp = self.batch
        self.applier.encode_dirty(cp)
        if cp.productions:
            cp.pending[self._new_batch_key()] = cp.productions
        # Weak productions not acknowledged by now are checkpointed, like strong ones:
        # those already sent and those made since the last send (e.g. by timers).
        self.flush_weak()
        handover = self.outbox.for_checkpoint(
            self._new_batch_key, weak=not self.deps.config.unsafe.unchecked_weak
        )
        cp.pending.update(handover.pending())
        cp.acked = handover.deleted
        if handover.segments_key is not None:
            cp.segments[handover.segments_key] = encode_segments(handover.segments)
        for key in handover.handed:
            cp.segments[key] = None
        if cp.is_empty():
            self._reset_batch()
            return None
        batch = self.open
        cp.records = batch.records
        cp.commit_id = self._new_batch_key()
        floor = self.watermark - self.deps.config.seen_gc_slack_ms
        if self.watermark > MIN_WATERMARK and floor >= self.seen_gc_done + 1000:
            cp.seen_gc_below = floor
        prepared = PreparedCommit(
            cp,
            handover,
            batch.opened_at,
            batch.timestamps,
            batch.arrivals,
            self.reports.oldest_timer(),
            min([p.timestamp for p in cp.productions], default=MAX_WATERMARK),
        )
        self.in_flight = prepared
        # the next batch; built while this one is in flight, its ids count as seen until durable
        self._reset_batch(seen=set(cp.seen) if self.deps.tuning.overlap_commits else None)
        self.cache.trim()  # (no key is dirty now; one forgotten is read back from ``_load``)
        return prepared

    def committed(self, prepared: PreparedCommit, commits: int) -> None:
        """The checkpoint is durable (the interval's ``commits``-th): its productions may
        be sent (once the witness covers it, when gated)."""
        cp = prepared.checkpoint
        self.in_flight = None
        self.durable_oldest_timer = prepared.oldest_timer
        self._committed_here = True
        self.commits = commits
        self.committed_positions.update(cp.positions)
        if cp.seen_gc_below is not None:
            self.seen_gc_done = cp.seen_gc_below
        self.outbox.checkpointed(prepared.outbox)
        if cp.productions:
            for batch_key, productions in cp.pending.items():
                if productions is cp.productions:
                    self.outbox.committed(batch_key, productions, commits)
        self.seen.committed(cp.seen)
        until = self.careful_until
        if (
            until is not None
            and time.monotonic() - self._careful_since >= self.deps.tuning.careful_s
            and all(self.committed_positions.get(f, -1) >= o for f, o in until.items())
        ):
            self.careful_until = None  # past the batch that was redone, and for long enough
            self.applier.careful = False

    # -- sending -------------------------------------------------------------------------

    def _refused(self, production: Production, why: str, error: str) -> Production:
        """The dead letter that replaces a production the broker refuses for good."""
        self.deps.counters.dead_letters += 1
        dead = dead_letters.refused(self.deps.dead_letter_topic, production, why, error, self.deps.clock())
        self.deps.on_error("production_refused", {"topic": production.topic, "error": error})
        return dead

    def refuse(self, production: Production, why: str, error: str) -> Production:
        """The dead letter that replaces a production the broker refuses for good."""
        return self._refused(production, why, error)

    def flush_weak(self) -> None:
        """Hand the weak productions of the last calls to the outbox for sending."""
        weak = self.applier.take_weak()
        if weak:
            self.outbox.send_weak(weak)

    @property
    def has_to_send(self) -> bool:
        """New weak productions, or batches released or failed and re-queued."""
        return bool(self.applier.weak or self.outbox.to_send or self.outbox.to_isolate)

    def take_to_send(self) -> list[OutboxBatch]:
        """The batches to send now (each is the delivery callback of its messages)."""
        self.flush_weak()
        return self.outbox.take_to_send()
