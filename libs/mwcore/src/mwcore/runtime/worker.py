"""The worker: runs one computation over the key intervals its consumer group assigns.

Loop, each turn (``step``):

1. fire due timers (event time on the input watermark, wall time on the clock);
2. read what has arrived and route it to its intervals (``Interval.process``);
3. serve delivery reports (the next commit deletes acknowledged productions and stores
   their backlog segments; the next watermark report hands those over);
4. commit every interval whose batch is full or whose deadline passed: one fenced
   checkpoint each, all in one round trip, then send its productions;
5. report the intervals' committed state to the watermark authority when a report is due.

With overlapping commits (the default; ``Tuning.overlap_commits``), step 4 only sends
the round trip, on a thread of its own, and the loop goes on: the turns after it build the next batches
while the store writes (``interval.py`` says what stays right meanwhile). The commit's
results are taken (its productions sent, the witness written) at the first turn after
it is done (a turn polls for at most 1 ms meanwhile), and always before the next
commit, a redo or a drain; an abort waits for it and drops them. At most one commit
turn is in flight (``commit_turns.py``), and a failed one drops its intervals as a
failed wait would. How a worker lets intervals go is ``stopping.py``.

On assignment an interval is taken over (``ownership.py``: a fresh token, recovery, the
commit witness check), its pending productions are re-sent, and its partitions start at
the offsets in its checkpoint (semantics I-2), never at the group's committed offsets.
Those carry the witness (and serve lag tools).
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import structlog

from mwcore.api.clock import MIN_WATERMARK, Clock
from mwcore.api.computation import Computation, state_codec_of
from mwcore.errors import FencedError
from mwcore.runtime import stopping
from mwcore.runtime.commit_turns import CommitTurns, Turn
from mwcore.runtime.config import Tuning, WorkerConfig
from mwcore.runtime.counters import Counters
from mwcore.runtime.delivery import Delivery
from mwcore.runtime.effects import RedoCareful
from mwcore.runtime.faults import NO_FAULTS, Faults
from mwcore.runtime.health import Health
from mwcore.runtime.interval import Interval
from mwcore.runtime.interval_deps import IntervalDeps
from mwcore.runtime.latency import LatencyRecorder
from mwcore.runtime.layout import Layout
from mwcore.runtime.ownership import Ownership
from mwcore.runtime.parts import Core
from mwcore.runtime.reports import ReportDraft
from mwcore.runtime.watermark_reporter import WatermarkReporter
from mwcore.runtime.witness import Witness
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.interface import CheckpointStore
from mwcore.store.report_sink import NullReportSink, ReportSink
from mwcore.transport.consumer import Member, Part
from mwcore.transport.schema_registry import RegistryClient, registered_framings
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.watermarks.source import WatermarkSource

log = structlog.get_logger("mwcore.runtime.worker")


class Worker:
    def __init__(
        self,
        computation: Computation[Any],
        config: WorkerConfig,
        store: CheckpointStore,
        registry: SchemaRegistry,
        watermarks: WatermarkSource,
        *,
        core: Core,
        tuning: Tuning | None = None,
        clock: Clock | None = None,
        faults: Faults = NO_FAULTS,
        reports: ReportSink | None = None,
        schemas: SchemaTopic | None = None,
        schema_registry: RegistryClient | None = None,
    ) -> None:
        computation.validate()
        self.comp = computation
        self.cfg = config
        self.core = core
        self.tuning = tuning = tuning or Tuning()
        self.store = store
        self.registry = registry
        # where start() publishes the writer schemas (looking writers up is the
        # registry's source, which the process plugs in: process.wiring)
        self.schemas = schemas or SchemaTopic(config.bootstrap, config.namespace)
        # where start() registers what streams framed "confluent" write and read (the
        # registry's id source, for reading, is plugged in by the process: process.wiring)
        self.schema_registry = schema_registry
        self.watermarks = watermarks
        self.clock = clock or Clock()
        self.faults = faults
        self.counters = Counters()
        self.layout = Layout.of(computation, config.namespace)
        self.topics = self.layout.inputs
        codec = state_codec_of(computation)
        codec.bind(registry)
        self.deps = IntervalDeps(
            computation=computation,
            store=store,
            core=core,
            config=config,
            codec=codec,
            inputs=self.layout.bindings(registry, core),
            encoders=self.layout.encoders(registry, core),
            topic_partitions=self.layout.topic_partitions(),
            dead_letter_topic=self.layout.dead_letters,
            late_topic=self.layout.late,
            exactly_once=computation.options.exactly_once and not config.unsafe.disable_dedup,
            tuning=tuning,
            faults=faults,
            counters=self.counters,
            record_latency=bool(tuning.latency_out),
            on_error=functools.partial(_told, computation.name),
            clock=self.clock.now_ms,
        )
        self.reporter = WatermarkReporter(
            reports or NullReportSink(),
            self.layout.spec(),
            self.clock.now_ms,
            config.report_interval_ms,
            background=tuning.overlap_commits,
        )
        self.latencies = LatencyRecorder() if tuning.latency_out else None
        self.consumer: Member | None = None
        self.witness = Witness(self.topics, signer=config.signer)
        self.delivery = Delivery(
            computation, config, core, self.witness, self._group_metadata, self.counters, tuning, faults
        )
        self.delivery.on_fenced = self._fenced
        self.sender = self.delivery.sender
        self.transactions = self.delivery.transactions  # productions="transactional"
        self.health = Health(config.metrics_stall_s)
        self.ownership = Ownership(
            self.deps,
            list(self.topics),
            self.witness,
            self.health,
            self.send,
            functools.partial(stopping.revoked, self),
            self.transactions,
        )
        self.intervals = self.ownership.intervals  # the intervals it owns, by index
        self.input_watermark = MIN_WATERMARK  # as last read, for metrics
        # (batch seconds, commit seconds) of each commit, when metrics are on
        self.on_commit: Callable[[float, float], None] | None = None
        self.turns = CommitTurns(store, tuning.overlap_commits)

    # -- membership ------------------------------------------------------------------------

    def start(self) -> None:
        """Create the topics, publish the writer schemas (``ConfigError`` if one is
        incompatible with an earlier version), declare, join the group. Idempotent."""
        if self.consumer is not None:
            return
        self.layout.create_topics(self.cfg.bootstrap)
        self._frame()  # the registry first: a schema it refuses leaves the schemas topic as it was
        self.schemas.publish(self.layout.writer_schemas(self.registry))
        self.reporter.declare()
        cfg = self.cfg
        self.consumer = self.core.consumer(
            cfg.bootstrap,
            self.layout.group,
            cfg.instance_id,
            cfg.session_timeout_ms,
            self.witness.on_committed,
        )
        self.ownership.join(self.consumer)
        log.info("joined", computation=self.comp.name, worker=cfg.worker_id, core=self.core.name)

    def _frame(self) -> None:
        """Each stream in its framing (those framed ``"confluent"`` registered first,
        ``transport/schema_registry.py``), and its codec made with it."""
        wires = self.layout.wires(self.cfg.wire, self.cfg.wire_read_also)
        if all(w == "single-object" and also is None for w, also in wires.values()):
            return  # the codecs made at construction
        schemas = self.layout.schemas(self.registry)
        framings = registered_framings(self.comp.name, self.schema_registry, wires, schemas)
        self.deps.inputs = self.layout.bindings(self.registry, self.core, framings)
        self.deps.encoders = self.layout.encoders(self.registry, self.core, framings)

    def acquire(self, index: int) -> Interval:
        """Take the interval over (``ownership.py``) and re-send its pending productions."""
        return self.ownership.acquire(index)

    # -- the loop --------------------------------------------------------------------------

    def step(self) -> None:
        consumer = self.consumer
        assert consumer is not None
        cfg = self.cfg
        # Timers first: what the watermark says is complete fires before more input is
        # read (with an exact watermark either order is correct).
        self.settle(wait=False)
        self._fire_timers()
        messages = consumer.poll(self.tuning.poll_records, self._poll_timeout())
        self.settle(wait=False)
        if messages:
            self.schemas.polled()  # a writer schema these need was published before them
            self._route(messages)
        if self.delivery.in_flight:
            self.transacted()
        if self.witness.newly_confirmed:  # served by the poll or a transaction: release what it covers
            self.release_witnessed()
        self.sender.poll(0)
        for index, interval in list(self.intervals.items()):
            if interval.has_acked:  # acknowledged, their deletion not yet committed
                self.faults.point("after_produce", functools.partial(dict, interval=index))
            if interval.has_to_send:  # new weak, or failed and re-queued
                self.send(interval)
            elif self.delivery.due(interval):
                self.send(interval)  # the witness of a checkpoint without productions
        if self.ownership.retakes:
            self.ownership.retake_due()
        now = time.monotonic()
        delay = cfg.max_batch_delay_ms / 1000
        due = [i for i in self.intervals.values() if i.due(now, cfg.max_batch_records, delay)]
        due = [i for i in due if self.delivery.ready(i)]  # (transactional: none in flight)
        if due:
            self.commit(*due, overlap=self.turns.overlapping)
        self.reporter.step(now, self.intervals)
        self.witness.flush(consumer)  # e.g. an interval recovered ahead of its witness
        if self.health.due(now):
            self._check_health(now)

    def _poll_timeout(self) -> float:
        """How long to wait for input: half the batch deadline, and shorter when an
        open batch is due sooner."""
        cap = self.cfg.max_batch_delay_ms / 2000
        if self.turns.in_flight or self.delivery.in_flight:  # look again soon: what it holds up waits
            cap = min(cap, 0.001)
        opened = [i.opened_at for i in self.intervals.values() if i.opened_at is not None]
        if not opened:
            return cap
        remaining = min(opened) + self.cfg.max_batch_delay_ms / 1000 - time.monotonic()
        return max(0.0, min(cap, remaining))

    def _route(self, messages: list[Any]) -> None:
        by_partition: dict[int, list[Any]] = defaultdict(list)
        for m in messages:
            by_partition[m.partition() or 0].append(m)
        for index, msgs in by_partition.items():
            interval = self.intervals.get(index)
            if interval is not None:  # else revoked meanwhile: the new owner reads from the checkpoint
                try:
                    interval.process(msgs)
                except RedoCareful as exc:
                    self._redo(interval, exc)

    def _fire_timers(self) -> None:
        if not self.intervals:
            return
        wm = self.input_watermark = self.watermarks.input_watermark(self.comp.name)
        now = self.clock.now_ms()
        for interval in list(self.intervals.values()):
            try:
                interval.fire_timers(wm, now, self.cfg.max_batch_records)
            except RedoCareful as exc:
                self._redo(interval, exc)

    def _check_health(self, now: float) -> None:
        """Is this worker doing its job (``health.py``)? Read by ``/healthz``."""
        assert self.consumer is not None
        intervals = self.intervals

        def committed_position(part: Part) -> int | None:
            interval = intervals.get(part.partition)
            return None if interval is None else interval.committed_position(part.topic, part.partition)

        self.health.check(now, self.consumer, committed_position, self.topics, self.comp.partitions)

    # -- commits ---------------------------------------------------------------------------

    def commit(self, *intervals: Interval, witness: bool = True, overlap: bool = False) -> None:
        """Commit the intervals' batches: one fenced, atomic checkpoint each, all in one
        round trip to the store; write the witness (``witness``: now, asynchronously;
        else the caller does) and send what it covers. ``overlap``: send the round trip
        and return; ``settle`` takes its results."""
        self.settle(witness=witness)
        prepared = []
        for interval in intervals:
            if self.intervals.get(interval.id.index) is not interval:
                continue  # fenced by the commit just taken
            if not self.delivery.ready(interval):
                continue  # an earlier checkpoint's transaction is to be sent again first
            if interval.open_production_ids():  # the zombie test pauses on a batch that has some
                self.faults.point("before_commit", functools.partial(self._describe, interval))
            try:
                ready = interval.prepare()
            except RedoCareful as exc:
                self._redo(interval, exc)
                continue
            if ready is not None:
                prepared.append((interval, ready))
        if not prepared:
            return
        turn = self.turns.run(prepared, overlap)
        if turn is not None:
            self._committed(turn, witness)

    def settle(self, wait: bool = True, witness: bool = True) -> None:
        """Take the results of the commit turn in flight, if there is one (``wait``:
        else only if it is done; ``witness``: as ``commit``'s)."""
        turn = self.turns.take(wait)
        if turn is not None:
            self._committed(turn, witness)

    def _committed(self, turn: Turn, witness: bool) -> None:
        """A commit turn's results: each durable checkpoint's productions sent (and the
        witness written, ``witness``); each fenced interval dropped."""
        done = time.monotonic()
        now_ms = self.clock.now_ms()
        began = turn.began
        for (interval, ready), result in zip(turn.prepared, turn.results, strict=True):
            if isinstance(result, FencedError):
                self._fenced(interval, result)
                continue
            if self.intervals.get(interval.id.index) is not interval:
                continue  # dropped while its commit was in flight (its partitions were lost)
            self.counters.commits += 1
            self.health.progressed(interval.id.index, done)
            if self.on_commit is not None:
                opened = ready.opened_at
                self.on_commit(done - (began if opened is None else opened), done - began)
            if self.latencies is not None:
                self.latencies.add(now_ms, ready.timestamps, ready.arrivals)
            self.faults.point("after_commit", functools.partial(dict, interval=str(interval.id)))
            interval.committed(ready, result)
            if self.transactions is None:  # (else written in the interval's transaction)
                self.witness.want(interval.id.index, result, dict(interval.committed_positions))
            self.send(interval)
        if witness and self.consumer is not None:
            self.witness.flush(self.consumer)

    def release_witnessed(self) -> None:
        """Hand each interval what the witness now covers (its held productions and
        report)."""
        confirmed = self.witness.confirmed
        reports: list[tuple[Interval, ReportDraft]] = []
        for index in self.witness.newly_confirmed:
            interval = self.intervals.get(index)
            if interval is not None:
                held = interval.reports.witness(confirmed[index])
                if held is not None:
                    reports.append((interval, held))
        self.witness.newly_confirmed.clear()
        self.reporter.send(reports)

    def _redo(self, interval: Interval, exc: RedoCareful) -> None:
        """The open batch cannot be committed as built (``effects.py``): redo it (from
        the store, so once a commit in flight is durable)."""
        self.settle()
        if self.intervals.get(interval.id.index) is not interval:
            return  # fenced by the commit just taken: dropped, taken back after the backoff
        self.counters.redone += 1
        self.ownership.redo(interval, exc)

    def _fenced(self, interval: Interval, exc: FencedError) -> None:
        if self.intervals.get(interval.id.index) is interval:  # (not one dropped meanwhile)
            self.counters.fenced += 1
        self.ownership.fenced(interval, exc)

    def _describe(self, interval: Interval) -> dict[str, Any]:
        return {
            "interval": str(interval.id),
            "token": interval.token,
            "worker": self.cfg.worker_id,
            "productions": [pid.hex() for pid in interval.open_production_ids()],
            "tokens": {str(i.id): i.token for i in self.intervals.values()},
        }

    def send(self, interval: Interval) -> None:
        self.delivery.send(interval)

    def transacted(self, wait: float = 0.0) -> None:
        """Take the transactions in flight that have ended (``wait``: waiting up to that
        many seconds for all of them)."""
        self.delivery.transacted(wait)

    def _group_metadata(self) -> bytes | None:
        return None if self.consumer is None else self.consumer.group_metadata()

    # -- stopping (``stopping.py``) ----------------------------------------------------------

    def abort(self) -> None:
        """After an error: drop every interval uncommitted (its batch may be half built),
        leave the group. The checkpoints in the store are what the next owner resumes."""
        stopping.abort(self)

    def shutdown(self) -> None:
        """Commit every batch, wait for acks, commit their deletion, leave the group."""
        stopping.shutdown(self)


def _told(computation: str, event: str, info: dict[str, Any]) -> None:
    """What the record path tells of a record it could not process: a warning, and an
    error for a bug of the kit's (``internal_error``)."""
    (log.error if event == "internal_error" else log.warning)(event, computation=computation, **info)
