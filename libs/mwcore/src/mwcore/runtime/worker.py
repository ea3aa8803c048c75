"""The worker: runs one computation over the key intervals its consumer group assigns.

Loop, each turn:

1. fire due timers (event time on the input watermark, wall time on the clock);
2. consume a chunk of messages and route them to their intervals (``Interval.process``);
3. serve delivery reports (the next commit deletes acknowledged productions and stores
   their backlog segments; the next watermark report hands those over);
4. commit every interval whose batch is full or whose deadline passed: one fenced
   checkpoint each, then send its productions;
5. report idle intervals to the watermark authority when a report is due.

On assignment an interval is granted a fresh token, recovered from the store, checked
against the commit witness (``witness.py``: a store that lost committed checkpoints
stops the worker), its pending productions are re-sent, and its partitions are
positioned at the offsets in the checkpoint (semantics I-2), never at the group's
committed offsets. Those carry the witness (and serve lag tools).
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from mwcore.api.clock import MIN_WATERMARK
from mwcore.api.codecs import AvroCodec
from mwcore.api.computation import Computation
from mwcore.api.record import ID_HEADER
from mwcore.errors import ConfigError, FencedError
from mwcore.runtime.faults import NO_FAULTS, Faults
from mwcore.runtime.health import Health, group_state
from mwcore.runtime.interval import Counters, InputBinding, Interval, IntervalDeps
from mwcore.runtime.latency import LatencyRecorder
from mwcore.runtime.witness import Witness
from mwcore.serde.avro import AvroSerde, SchemaRegistry, SchemaVersion
from mwcore.store.checkpoint import Checkpoint, position_field
from mwcore.store.interface import CheckpointStore, IntervalId
from mwcore.store.reports import NullReportSink, ReportSink
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.transport.topics import (
    consumer_config,
    dead_letter_stream,
    ensure_topics,
    late_stream,
    producer_config,
    rekey_stream,
    topic_name,
)
from mwcore.watermarks.reports import NodeSpec, Report
from mwcore.watermarks.source import WatermarkSource

log = structlog.get_logger("mwcore.runtime.worker")


@dataclass(frozen=True)
class WorkerConfig:
    bootstrap: str
    namespace: str = "default"
    worker_id: str = "worker"
    instance_id: str | None = None  # static group membership: fast restarts
    max_batch_records: int = 5000
    max_batch_delay_ms: int = 10
    # productions and watermark reports of a checkpoint wait until the commit witness
    # covers it (witness.py); off: the witness only detects (no added latency)
    witness_gate: bool = True
    health_stall_s: float = 60.0  # no progress this long while input waits: unhealthy (health.py)
    session_timeout_ms: int = 1500  # also sets the heartbeat: a tenth of it
    poll_records: int = 5000
    max_cache_keys: int = 100_000
    latency_out: str = ""  # if set: record commit latency, write percentiles here at exit
    refence_backoff_s: float = 10.0  # after losing an interval to another grant
    report_interval_ms: int = 100  # watermark reports to the authority
    seen_gc_slack_ms: int = 60_000
    # Negative controls only (settings: MW_UNSAFE_*): each turns one mechanism off.
    unsafe_keep_fired_timers: bool = False
    unsafe_drop_dead_letters: bool = False
    unsafe_unchecked_weak: bool = False
    unsafe_skip_drain: bool = False
    unsafe_no_retake: bool = False
    unsafe_ignore_rollback: bool = False  # a store behind the witness is used anyway


class Clock:
    """Wall clock in milliseconds; tests substitute their own."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


def input_topics(comp: type[Computation] | Computation, namespace: str) -> dict[str, str]:
    """topic -> stream for every input (re-keyed inputs read their repartition topic)."""
    out: dict[str, str] = {}
    for inp in comp.inputs:
        stream = inp.stream if inp.key is None else rekey_stream(comp.name, inp.stream)
        out[topic_name(namespace, stream)] = inp.stream
    return out


class Worker:
    def __init__(
        self,
        computation: Computation,
        config: WorkerConfig,
        store: CheckpointStore,
        registry: SchemaRegistry,
        watermarks: WatermarkSource,
        *,
        clock: Clock | None = None,
        faults: Faults = NO_FAULTS,
        exactly_once: bool | None = None,
        reports: ReportSink | None = None,
        schemas: SchemaTopic | None = None,
    ) -> None:
        computation.validate()
        self.comp = computation
        self.cfg = config
        self.store = store
        self.registry = registry
        # where start() publishes the writer schemas (looking writers up is the
        # registry's source, which the process plugs in: app.build_workers)
        self.schemas = schemas or SchemaTopic(config.bootstrap, config.namespace)
        self.watermarks = watermarks
        self.clock = clock or Clock()
        self.faults = faults
        self.reports: ReportSink = reports or NullReportSink()
        self._next_report = 0.0
        self._report_wanted: set[int] = set()
        self._next_declare = 0.0
        self.counters = Counters()
        self.intervals: dict[int, Interval] = {}
        self._stopping = False
        ns = config.namespace
        self.group = topic_name(ns, f"mw.{computation.name}")
        self.topics = input_topics(computation, ns)
        codec = computation.state
        codec.bind(registry)
        inputs: dict[str, InputBinding] = {}
        for inp in computation.inputs:
            serde = AvroSerde(registry, inp.schema or "")
            for topic, stream in self.topics.items():
                if stream == inp.stream:
                    inputs[topic] = InputBinding(inp.stream, serde)
        encoders: dict[str, tuple[str, Callable[[Any], bytes]]] = {}
        for out in computation.outputs:
            encoders[out.stream] = (topic_name(ns, out.stream), AvroSerde(registry, out.schema).encode)
        self.dead_letter_topic = topic_name(ns, dead_letter_stream(computation.name))
        self.late_topic = topic_name(ns, late_stream(computation.name))
        eo = computation.options.exactly_once if exactly_once is None else exactly_once
        self.deps = IntervalDeps(
            computation=computation,
            store=store,
            codec=codec,
            inputs=inputs,
            encoders=encoders,
            dead_letter_topic=self.dead_letter_topic,
            late_topic=self.late_topic if computation.options.late == "route" else "",
            exactly_once=eo,
            max_cache_keys=config.max_cache_keys,
            seen_gc_slack_ms=config.seen_gc_slack_ms,
            faults=faults,
            counters=self.counters,
            on_error=lambda event, info: log.warning(event, computation=computation.name, **info),
            clock=self.clock.now_ms,
            witness_gated=config.witness_gate,
            record_latency=bool(config.latency_out),
            unsafe_keep_fired_timers=config.unsafe_keep_fired_timers,
            unsafe_drop_dead_letters=config.unsafe_drop_dead_letters,
            unsafe_unchecked_weak=config.unsafe_unchecked_weak,
        )
        self.latencies = LatencyRecorder() if config.latency_out else None
        self.producer = Producer(producer_config(config.bootstrap))
        self.consumer: Consumer | None = None
        self.witness = Witness(self.topics)
        self.health = Health(config.health_stall_s)
        self._refence: dict[int, float] = {}  # fenced interval -> when to try to take it back
        self.input_watermark = MIN_WATERMARK  # as last read, for metrics
        # (batch seconds, commit seconds) of each commit, when metrics are on
        self.on_commit: Callable[[float, float], None] | None = None

    # -- set-up ------------------------------------------------------------------------

    def create_topics(self) -> None:
        n = self.comp.partitions
        topics = {t: n for t in self.topics}
        for out in self.comp.outputs:
            topics[topic_name(self.cfg.namespace, out.stream)] = out.partitions or n
        topics[self.dead_letter_topic] = 1
        if self.comp.options.late == "route":
            topics[self.late_topic] = 1
        ensure_topics(self.cfg.bootstrap, topics)

    def writer_schemas(self) -> list[SchemaVersion]:
        """Every schema this worker encodes with: its outputs', its inputs' (a record
        that fails is dead-lettered re-encoded with its reader schema) and its state's."""
        names = [o.schema for o in self.comp.outputs] + [i.schema for i in self.comp.inputs if i.schema]
        if isinstance(self.comp.state, AvroCodec):
            names.append(self.comp.state.schema)
        return [self.registry.latest(name) for name in dict.fromkeys(names)]

    def spec(self) -> NodeSpec:
        """What this computation reads and writes, for the watermark authority."""
        ns = self.cfg.namespace
        outputs = [topic_name(ns, o.stream) for o in self.comp.outputs] + [self.dead_letter_topic]
        if self.comp.options.late == "route":
            outputs.append(self.late_topic)
        side = {inp.stream for inp in self.comp.inputs if not inp.watermark}
        inputs = tuple(t for t, stream in self.topics.items() if stream not in side)
        return NodeSpec(self.comp.name, "computation", inputs, tuple(outputs), self.comp.partitions)

    def _interval_id(self, partition: int) -> IntervalId:
        return IntervalId(self.cfg.namespace, self.comp.name, partition)

    # -- rebalance callbacks -------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        by_interval: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in partitions:
            by_interval[tp.partition].append(tp)
        for index, tps in by_interval.items():
            self._refence.pop(index, None)
            interval = self.intervals.get(index)
            if interval is None:
                interval = self._acquire(index)
            for tp in tps:
                tp.offset = self._start_offset(interval, tp)
        consumer.assign(partitions)
        # A partition paused when its interval was fenced stays paused in librdkafka
        # across a revoke and a new assignment (found by bench/chaos.py: a rebalance
        # between the fence and the retake left two intervals owned and never fetched).
        consumer.resume(partitions)
        log.info(
            "assigned",
            computation=self.comp.name,
            worker=self.cfg.worker_id,
            intervals=sorted(by_interval),
        )

    def _start_offset(self, interval: Interval, tp: TopicPartition) -> int:
        """Where a partition resumes: the checkpoint's position (never the group's)."""
        fld = position_field(tp.topic, tp.partition)
        pos = interval.positions.get(fld)
        if pos is not None:
            return pos
        if self.comp.options.start_from == "latest":
            # The partition's end as the broker has it now, assigned as an explicit offset
            # and committed with the interval's next checkpoint: a crash before the first
            # record resumes here and skips nothing written since. (The consumer's own
            # position is unknown until it has returned a record, so OFFSET_END could
            # not be made durable before then.)
            assert self.consumer is not None
            _, end = self.consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=30, cached=False
            )
            interval.positions[fld] = end
            interval.batch.positions[fld] = end
            interval._touch()
            return int(end)
        return OFFSET_BEGINNING

    def _acquire(self, index: int) -> Interval:
        iid = self._interval_id(index)
        t0 = time.monotonic()
        token = self.store.grant(iid, self.cfg.worker_id)
        snapshot = self.store.recover(iid, token)
        t1 = time.monotonic()
        witnessed = self._witnessed_commits(iid, snapshot.commits)
        t2 = time.monotonic()
        interval = Interval(iid, snapshot, self.deps)
        interval.outbox.witness(witnessed)
        self.intervals[index] = interval
        self.health.progressed(index)
        if witnessed < snapshot.commits:  # re-sent productions wait for the witness to catch up
            self.witness.want(index, snapshot.commits, interval.committed_positions)
        log.info(
            "interval_acquired",
            interval=str(iid),
            token=token,
            commits=snapshot.commits,
            pending=len(snapshot.pending),
            timers=len(snapshot.timers),
            seen=len(snapshot.seen),
            # where a takeover's time goes: grant and recovery, the witness, the rest
            store_ms=round((t1 - t0) * 1000),
            witness_ms=round((t2 - t1) * 1000),
            build_ms=round((time.monotonic() - t2) * 1000),
        )
        self._send(interval)
        return interval

    def _witnessed_commits(self, iid: IntervalId, store_commits: int) -> int:
        """What Kafka witnessed of the interval's commits; a store behind it lost
        committed checkpoints: stop (``StoreRollbackError``) before producing anything."""
        self.witness.forget(iid.index)
        if self.consumer is None:
            return store_commits
        witnessed = self.witness.read(self.consumer, iid.index)
        if self.cfg.unsafe_ignore_rollback:
            if witnessed > store_commits:
                log.warning("rollback_ignored", interval=str(iid), store=store_commits, witness=witnessed)
            return min(witnessed, store_commits)
        self.witness.check(str(iid), store_commits, witnessed)
        return witnessed

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        indexes = {tp.partition for tp in partitions}
        for index in indexes:
            self._refence.pop(index, None)
            self.witness.forget(index)
            self.health.forget(index)
        self._drain([self.intervals[i] for i in sorted(indexes) if i in self.intervals], 3.0)
        self._release([self.intervals.pop(index) for index in indexes if index in self.intervals])
        consumer.unassign()
        log.info("revoked", computation=self.comp.name, intervals=sorted(indexes))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.intervals.pop(tp.partition, None)
            self._refence.pop(tp.partition, None)
            self.witness.forget(tp.partition)
            self.health.forget(tp.partition)
        log.warning("partitions_lost", computation=self.comp.name)

    # -- the loop --------------------------------------------------------------------------

    def start(self) -> None:
        """Create the topics, publish the writer schemas (``ConfigError`` if one is
        incompatible with an earlier version), join the group. Idempotent."""
        if self.consumer is not None:
            return
        self.create_topics()
        self.schemas.publish(self.writer_schemas())
        self.reports.declare(self.spec())
        session = self.cfg.session_timeout_ms
        conf = consumer_config(
            self.cfg.bootstrap,
            self.group,
            self.cfg.instance_id,
            **{
                "session.timeout.ms": session,
                # a member learns of a rebalance at its next heartbeat: a tenth of the
                # session keeps hand-overs short (0.35 s of 0.8 s at a quarter, here)
                "heartbeat.interval.ms": max(100, session // 10),
                "on_commit": self.witness.on_commit,
            },
        )
        self.consumer = Consumer(conf)
        self.consumer.subscribe(
            list(self.topics), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Run this worker alone until stopped (see ``Runner`` for the loop's rules)."""
        from mwcore.runtime.runner import Runner

        Runner([self]).run(lambda: self._stopping or should_stop())

    def stop(self) -> None:
        self._stopping = True

    def step(self) -> None:
        assert self.consumer is not None
        cfg = self.cfg
        # Timers first: what the watermark says is complete fires before more input is
        # read (with an exact watermark either order is correct).
        self._fire_timers()
        messages = self._poll()
        if messages:
            self._route(messages)
        if self.witness.newly_confirmed:  # served by the poll: release what it covers
            self._release_witnessed()
        self.producer.poll(0)
        for index, interval in list(self.intervals.items()):
            if interval.outbox.acked:  # acknowledged, their deletion not yet committed
                self.faults.point("after_produce", functools.partial(dict, interval=index))
            if interval.weak_buffer or interval.outbox.to_send:  # new weak, or failed and re-queued
                self._send(interval)
        if self._refence:
            self._retake_fenced()
        now = time.monotonic()
        delay = cfg.max_batch_delay_ms / 1000
        due = [i for i in self.intervals.values() if i.due(now, cfg.max_batch_records, delay)]
        if due:
            self._commit(*due)
        self._report(now)
        self.witness.flush(self.consumer)  # e.g. an interval recovered ahead of its witness
        if self.health.due(now):
            self._check_health(now)

    def _check_health(self, now: float) -> None:
        """Is this worker doing its job (``health.py``)? Read by ``/healthz``."""
        consumer = self.consumer
        assert consumer is not None
        assigned = consumer.assignment()
        if not assigned:
            self.health.check_unassigned(
                now, lambda: group_state(consumer, self.topics, self.comp.partitions)
            )
            return
        waiting: dict[int, int] = defaultdict(int)
        for tp in assigned:
            _, high = consumer.get_watermark_offsets(tp, cached=True)
            interval = self.intervals.get(tp.partition)
            fld = position_field(tp.topic, tp.partition)
            pos = None if interval is None else interval.committed_positions.get(fld)
            if pos is None:
                pos = consumer.position([tp])[0].offset
            waiting[tp.partition] += max(0, high - max(0, pos)) if high >= 0 else 0
        self.health.check_assigned(now, waiting.items())

    def _report(self, now: float, force: bool = False) -> None:
        """Every ``report_interval_ms``, report each interval to the watermark authority
        as soon as it has no open batch (its committed state is then its soft state).
        Acknowledged productions' segments are in the checkpoint by then; they leave the
        oldest work in the report that hands them to the backlog, and are deleted from
        the checkpoint only once that report is written. A report shows only witnessed
        state (``witness.py``): one made before the witness covers its checkpoint is held
        and sent once it does (under load a newer commit is always in flight, so waiting
        for an idle, witnessed moment could starve the reports)."""
        if now >= self._next_declare:  # again and again: survives a wiped topology
            self._next_declare = now + 10.0
            self.reports.declare(self.spec())
        if force:
            self._report_wanted = set(self.intervals)
        elif now >= self._next_report:
            if not self._report_wanted:
                self._report_wanted = set(self.intervals)
            self._next_report = now + self.cfg.report_interval_ms / 1000
        if not self._report_wanted:
            return
        ready: list[tuple[Interval, Report, list[bytes]]] = []
        now_ms = self.clock.now_ms()
        for index in list(self._report_wanted):
            interval = self.intervals.get(index)
            if interval is None:
                self._report_wanted.discard(index)
            elif interval.idle():
                report, keys = interval.report(now_ms)
                if interval.witnessed():
                    interval.held_report = None
                    ready.append((interval, report, keys))
                else:
                    interval.held_report = (interval.commits, report, keys)
                self._report_wanted.discard(index)
        self._send_reports(ready)

    def _send_reports(self, ready: list[tuple[Interval, Report, list[bytes]]]) -> None:
        if not ready:
            return
        self.reports.send(self.comp.name, [r for _, r, _ in ready])  # if this fails, they stay stored
        for interval, _, keys in ready:
            interval.outbox.reported(keys)

    def _poll(self) -> list[Message]:
        """What has arrived, at once; if nothing has, wait for the first message (at
        most until an open batch is due), then take what came with it. (``consume``
        with a timeout waits for a full chunk, and so held every record back.)"""
        assert self.consumer is not None
        n = self.cfg.poll_records
        messages = self.consumer.consume(n, 0)
        if not messages:
            first = self.consumer.poll(self._poll_timeout())
            if first is not None:
                messages = [first, *self.consumer.consume(n - 1, 0)]
        return messages

    def _poll_timeout(self) -> float:
        """How long to wait for input: half the batch deadline, and shorter when an
        open batch is due sooner."""
        cap = self.cfg.max_batch_delay_ms / 2000
        started = [i.batch_started for i in self.intervals.values() if i.batch_started is not None]
        if not started:
            return cap
        remaining = min(started) + self.cfg.max_batch_delay_ms / 1000 - time.monotonic()
        return max(0.0, min(cap, remaining))

    def _route(self, messages: list[Message]) -> None:
        by_partition: dict[int, list[Message]] = defaultdict(list)
        for m in messages:
            err = m.error()
            if err is not None:
                self._consumer_error(err)
                continue
            by_partition[m.partition() or 0].append(m)
        for index, msgs in by_partition.items():
            interval = self.intervals.get(index)
            if interval is None:
                continue  # revoked meanwhile; the new owner reads from the checkpoint
            interval.process(msgs)

    def _consumer_error(self, err: KafkaError) -> None:
        """An error the consumer hands over instead of a message: a setting the broker
        refuses stops the worker with one line; anything else is logged (librdkafka
        retries on its own)."""
        if err.code() == KafkaError.INVALID_SESSION_TIMEOUT:
            raise ConfigError(
                f"the broker refuses MW_SESSION_TIMEOUT_MS={self.cfg.session_timeout_ms}: its "
                "group.min.session.timeout.ms is higher (6000 by Kafka's default); lower that "
                "on the broker, or raise MW_SESSION_TIMEOUT_MS to at least it"
            )
        log.warning("consumer_error", computation=self.comp.name, error=err.str(), code=err.name())

    def _fire_timers(self) -> None:
        if not self.intervals:
            return
        wm = self.input_watermark = self.watermarks.input_watermark(self.comp.name)
        now = self.clock.now_ms()
        for interval in list(self.intervals.values()):
            interval.fire_timers(wm, now, self.cfg.max_batch_records)

    def _commit(self, *intervals: Interval, witness: bool = True) -> None:
        """Commit the intervals' batches: one fenced, atomic checkpoint each, all in one
        round trip to the store; write the witness (``witness``: now, asynchronously;
        else the caller does) and send what it covers."""
        prepared: list[tuple[Interval, Checkpoint]] = []
        for interval in intervals:
            if interval.batch.productions:  # the zombie test pauses on a batch that has some
                self.faults.point("before_commit", functools.partial(self._describe, interval))
            cp = interval.prepare()
            if cp.is_empty():
                interval._reset_batch()
            else:
                prepared.append((interval, cp))
        if not prepared:
            return
        began = time.monotonic()
        results = self.store.commit_many([(i.id, i.token, cp) for i, cp in prepared])
        done = time.monotonic()
        now_ms = self.clock.now_ms()
        for (interval, cp), result in zip(prepared, results, strict=True):
            if isinstance(result, FencedError):
                self._fenced(interval, result)
                continue
            self.counters.commits += 1
            self.health.progressed(interval.id.index, done)
            if self.on_commit is not None:
                opened = interval.batch_started
                self.on_commit(done - (began if opened is None else opened), done - began)
            if self.latencies is not None:
                self.latencies.add(now_ms, interval.batch_timestamps, interval.batch_arrivals)
            self.faults.point("after_commit", functools.partial(dict, interval=str(interval.id)))
            interval.committed(cp, result)
            self.witness.want(interval.id.index, result, dict(interval.committed_positions))
            self._send(interval)
        if witness and self.consumer is not None:
            self.witness.flush(self.consumer)

    def _release_witnessed(self) -> None:
        """Hand each interval what the witness now covers (its held productions)."""
        confirmed = self.witness.confirmed
        ready = []
        for index in self.witness.newly_confirmed:
            interval = self.intervals.get(index)
            if interval is not None:
                interval.outbox.witness(confirmed[index])
                held = interval.held_report
                if held is not None and held[0] <= confirmed[index]:
                    interval.held_report = None
                    ready.append((interval, held[1], held[2]))
        self.witness.newly_confirmed.clear()
        self._send_reports(ready)

    def _fenced(self, interval: Interval, exc: FencedError) -> None:
        """Drop the interval's soft state; stop reading it; try to take it back later.

        After a Redis restart every token is void, so take it back at once. After
        another worker's grant, this one is most likely a zombie that the group is
        about to tell; take the interval back only if the group still says it is ours
        after a while (the other grant's holder may have died).
        """
        index = interval.id.index
        self.counters.fenced += 1
        self.intervals.pop(index, None)
        self.witness.forget(index)
        if self.consumer is not None:
            self.consumer.pause(self._partitions(index))
        delay = 0.0 if exc.store_restarted else self.cfg.refence_backoff_s
        if not self.cfg.unsafe_no_retake:
            self._refence[index] = time.monotonic() + delay
        log.warning(
            "fenced",
            interval=str(interval.id),
            token=interval.token,
            reason=exc.reason,
            worker=self.cfg.worker_id,
        )

    def _partitions(self, index: int) -> list[TopicPartition]:
        return [TopicPartition(topic, index) for topic in self.topics]

    def _retake_fenced(self) -> None:
        assert self.consumer is not None
        now = time.monotonic()
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        for index, at in list(self._refence.items()):
            if now < at:
                continue
            del self._refence[index]
            tps = [tp for tp in self._partitions(index) if (tp.topic, tp.partition) in assigned]
            if not tps:
                continue  # the group moved it elsewhere meanwhile
            interval = self._acquire(index)
            for tp in tps:
                tp.offset = self._start_offset(interval, tp)
                self.consumer.seek(tp)  # back to the checkpoint: what was fetched is stale
            self.consumer.resume(tps)
            log.info("interval_retaken", interval=str(interval.id), token=interval.token)

    def _describe(self, interval: Interval) -> dict[str, Any]:
        cp = interval.batch
        return {
            "interval": str(interval.id),
            "token": interval.token,
            "worker": self.cfg.worker_id,
            "productions": [p.id.hex() for p in cp.productions],
            "tokens": {str(i.id): i.token for i in self.intervals.values()},
        }

    def _send(self, interval: Interval) -> None:
        interval.flush_weak()
        produce = self.producer.produce
        sent_by = ("mw-sender", self.cfg.worker_id.encode())
        for batch in interval.outbox.take_to_send():
            self.counters.productions += len(batch.productions)
            for p in batch.productions:
                headers: list[tuple[str, str | bytes | None]] = [(ID_HEADER, p.id), sent_by]
                if p.headers:
                    headers += p.headers
                while True:
                    try:
                        produce(
                            p.topic, p.value, p.key, timestamp=p.timestamp, headers=headers, on_delivery=batch
                        )
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                    except KafkaException as exc:  # refused outright: count it as failed, retry later
                        log.error("produce_refused", topic=p.topic, error=str(exc))
                        batch(exc, None)
                        break

    def _drain(self, intervals: list[Interval], flush_s: float) -> None:
        """Commit the intervals' batches, wait (once, for all) for Kafka's
        acknowledgements, then commit their deletion. Unacknowledged batches stay
        pending in the checkpoint and are re-sent by the next owner."""
        self._commit(*intervals, witness=False)
        self._witness_now(intervals)
        self.producer.flush(flush_s)
        self.producer.poll(0)
        live = [i for i in intervals if i.id.index in self.intervals]
        self._commit(*[i for i in live if i.outbox.has_cleanup], witness=False)  # delete the acknowledged
        self._witness_now(live)  # (reports show witnessed state only)
        self._report(time.monotonic(), force=True)
        # delete the segments just reported
        self._commit(*[i for i in live if i.outbox.has_cleanup and i.id.index in self.intervals])

    def _witness_now(self, intervals: list[Interval]) -> None:
        """Write the witness and wait for it (no callback is served in a hand-over),
        then send what it releases."""
        if self.consumer is None:
            return
        for interval in intervals:  # also what asynchronous writes in flight cover
            if interval.id.index in self.intervals and not interval.witnessed():
                self.witness.want(interval.id.index, interval.commits, dict(interval.committed_positions))
        self.witness.flush_sync(self.consumer)
        self._release_witnessed()
        for interval in intervals:
            if interval.id.index in self.intervals:
                self._send(interval)

    def _release(self, intervals: list[Interval]) -> None:
        """Handed over cleanly: Redis no longer names this worker as their owner (best
        effort: the next grant names the next owner anyway)."""
        for interval in intervals:
            try:
                self.store.release(interval.id, interval.token)
            except Exception as exc:
                log.warning("release_failed", interval=str(interval.id), error=str(exc))

    def abort(self) -> None:
        """After an error: drop every interval uncommitted (its batch may be half built),
        leave the group. The checkpoints in the store are what the next owner resumes."""
        self.intervals.clear()
        self._refence.clear()
        if self.consumer is not None:
            try:
                self.consumer.close()
            except Exception as exc:  # leaving is best effort; the session timeout covers it
                log.warning("close_failed", error=str(exc))
            self.consumer = None
        self.producer.flush(5)  # committed productions in flight; resent on recovery anyway
        log.error("aborted", computation=self.comp.name, worker=self.cfg.worker_id, **vars(self.counters))

    def shutdown(self) -> None:
        """Commit every batch, wait for acks, commit their deletion, leave the group."""
        if self.cfg.unsafe_skip_drain:
            self.intervals.clear()  # nothing committed or drained, not even on revocation
        else:
            self._drain(list(self.intervals.values()), 10.0)
            self._release(list(self.intervals.values()))
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None
        log.info("stopped", computation=self.comp.name, worker=self.cfg.worker_id, **vars(self.counters))
        if self.latencies is not None:
            self.latencies.write(self.cfg.latency_out)
