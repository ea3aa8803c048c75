"""One owned key interval: its soft state and the batch being built.

Soft state (decoded per-key state cache, timer queue, Bloom filter of seen ids,
positions, productions in flight) is valid only while the interval's token is
current (semantics I-5); on ``FencedError`` the worker drops the whole object.

A batch goes: ``process`` (records) and ``fire_timers`` add effects; ``prepare``
turns them into a ``Checkpoint``; the worker commits it; ``committed`` then hands
back the productions to send. Acknowledged productions are deleted in the next
checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from confluent_kafka import Message

from mwcore.api import ids
from mwcore.api.clock import MIN_WATERMARK
from mwcore.api.codecs import StateCodec
from mwcore.api.computation import Computation
from mwcore.api.context import _UNSET, Context, Effects
from mwcore.api.record import ID_HEADER, LATE_HEADER, Production, Record, TimeDomain, Timer
from mwcore.errors import SerializationError
from mwcore.runtime.bloom import BloomFilter
from mwcore.runtime.faults import NO_FAULTS, Faults
from mwcore.runtime.outbox import Outbox
from mwcore.runtime.timers import TimerEntry, TimerQueue, encode_entry, field_of
from mwcore.serde.avro import AvroSerde
from mwcore.store.checkpoint import Checkpoint, Snapshot, position_field
from mwcore.store.interface import CheckpointStore, IntervalId
from mwcore.watermarks.reports import Report, Segment, encode_segments

_ABSENT: Any = object()  # not in the cache
_tuple_new = tuple.__new__  # builds a NamedTuple without its Python-level __new__
DLQ_INDEX = 0xFFFF_FFFF  # production index of a record's dead letter
BLOOM_MIN_CAPACITY = 200_000
LATE_INDEX = 0xFFFF_FFFE  # production index of a late record's copy on the late topic


class Incoming(NamedTuple):
    """The fields of a consumed Kafka message, read once."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int
    id: bytes
    late: bytes | None  # the injector's mw-late-ms header, if it let the record through late


@dataclass
class Counters:
    records: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    late_records: int = 0
    timers_fired: int = 0
    late_productions: int = 0
    commits: int = 0
    fenced: int = 0
    bloom_maybe: int = 0
    productions: int = 0  # sent to Kafka (re-sends after a crash or a failure included)


@dataclass
class InputBinding:
    """How messages of one input topic become records."""

    stream: str
    serde: AvroSerde


@dataclass
class IntervalDeps:
    """What an interval needs from its worker (shared by all intervals of a worker)."""

    computation: Computation
    store: CheckpointStore
    codec: StateCodec[Any]
    inputs: dict[str, InputBinding]  # topic -> binding
    encoders: dict[str, tuple[str, Callable[[Any], bytes]]]  # stream -> (topic, encode)
    dead_letter_topic: str
    late_topic: str = ""  # "": drop late records (counted)
    exactly_once: bool = True
    max_cache_keys: int = 100_000
    seen_gc_slack_ms: int = 60_000  # seen ids are forgotten this long behind the input watermark
    faults: Faults = NO_FAULTS
    counters: Counters = field(default_factory=Counters)
    record_latency: bool = False  # keep each batch's record timestamps (benchmarks)
    on_error: Callable[[str, dict[str, Any]], None] = lambda event, info: None
    clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000
    witness_gated: bool = False  # productions and reports wait for the commit witness
    # Negative controls only (settings: MW_UNSAFE_*); each turns one mechanism off:
    unsafe_keep_fired_timers: bool = False  # a firing does not delete its timer's checkpoint copy
    unsafe_drop_dead_letters: bool = False  # a bad record is skipped, no dead letter produced
    unsafe_unchecked_weak: bool = False  # unacknowledged weak productions are not checkpointed


class Interval:
    def __init__(self, iid: IntervalId, snapshot: Snapshot, deps: IntervalDeps) -> None:
        self.id = iid
        self.token = snapshot.token
        self.deps = deps
        self.comp = deps.computation
        self.positions: dict[str, int] = dict(snapshot.positions)
        self.cache: dict[str, Any] = {}
        self.timers = TimerQueue()
        for entry in snapshot.timers:
            self.timers.set(entry)
        self.bloom = BloomFilter(capacity=max(BLOOM_MIN_CAPACITY, 2 * len(snapshot.seen)))
        self.bloom.add_many(snapshot.seen)
        self.commits = snapshot.commits
        # Pending batches of the snapshot are sent again first.
        self.outbox = Outbox(
            snapshot.pending, snapshot.segments, recovered_commit=snapshot.commits, gated=deps.witness_gated
        )
        self._outbox_ck: tuple[int, bytes | None, list[Segment], int] = (0, None, [], 0)
        self.weak_buffer: list[Production] = []
        # a watermark report waiting for the commit witness: (its commit count, report, segment keys)
        self.held_report: tuple[int, Report, list[bytes]] | None = None
        self._batch_seq = 0
        self._failed_state: Exception = SerializationError("")
        self.committed_positions: dict[str, int] = dict(snapshot.positions)
        self.watermark = MIN_WATERMARK  # the input watermark timers last fired on
        self.seen_gc_done = MIN_WATERMARK
        self.ctx = Context(deps.encoders, self._state_for, deps.clock)
        self._weak = self.comp.options.productions == "weak"
        self._encode_state = deps.codec.encode
        self._reset_batch()

    # -- batch bookkeeping -------------------------------------------------------------

    def _reset_batch(self) -> None:
        self.batch = Checkpoint()
        self.batch_seen: set[bytes] = set()
        self.batch_started: float | None = None
        self.batch_records = 0
        self.batch_timestamps: list[int] = []  # when latency is recorded: each record's
        self.batch_arrivals: list[int] = []  # timestamp, and when it reached the worker

    def _touch(self) -> None:
        if self.batch_started is None:
            self.batch_started = time.monotonic()

    def due(self, now: float, max_records: int, max_delay_s: float) -> bool:
        if self.batch_records >= max_records:
            return True
        started = self.batch_started
        if started is None:
            outbox = self.outbox
            return outbox.has_cleanup and now - outbox.first_acked_at >= max_delay_s
        return now - started >= max_delay_s

    def idle(self) -> bool:
        """No batch open: the soft state is exactly the last committed checkpoint."""
        return self.batch_started is None and self.batch.is_empty()

    def witnessed(self) -> bool:
        """The commit witness covers the last checkpoint (always, when not gated): a
        watermark report may show its state."""
        return not self.outbox.gated or self.outbox.witnessed >= self.commits

    def oldest_work(self, handing_over: bool = False) -> int:
        """Oldest timestamp this interval may still produce at or hold back: pending
        productions not yet handed to the backlog, pending timers and watermark holds
        (``TimeDomain.HOLD``: state the computation will produce from later). Only meaningful
        when ``idle()`` (an open batch's records are still in the input backlog)."""
        oldest = self.outbox.oldest(handing_over)
        for domain in (TimeDomain.EVENT, TimeDomain.WALL, TimeDomain.HOLD):
            ts = self.timers.oldest(domain)
            if ts is not None and ts < oldest:
                oldest = ts
        return oldest

    def report(self, now_ms: int) -> tuple[Report, list[bytes]]:
        """The watermark report of the committed state (call only when ``idle()``).
        Its segments leave the oldest work in the same report that hands them over;
        pass the returned keys to ``outbox.reported`` once the report is written."""
        keys, segments = self.outbox.handed()
        r = Report(
            index=self.id.index,
            token=self.token,
            oldest=self.oldest_work(handing_over=True),
            positions=dict(self.committed_positions),
            segments=tuple(segments),
            sent_ms=now_ms,
        )
        return r, keys

    def _new_batch_key(self) -> bytes:
        self._batch_seq += 1
        return ids.derive(self.token.encode(), self._batch_seq)

    # -- state -------------------------------------------------------------------------

    def _state_for(self, key: str) -> Any:
        value = self.cache.get(key, _ABSENT)
        if value is _ABSENT:
            raw = self.deps.store.load_state(self.id, [key.encode()])[0]
            value = None if raw is None else self.deps.codec.decode(raw)
            self.cache[key] = value
        return value

    def _preload(self, keys: set[str]) -> None:
        missing = [k for k in keys if k not in self.cache]
        if not missing:
            return
        raws = self.deps.store.load_state(self.id, [k.encode() for k in missing])
        decode = self.deps.codec.decode
        for k, raw in zip(missing, raws, strict=True):
            self.cache[k] = None if raw is None else decode(raw)

    # -- records -----------------------------------------------------------------------

    def process(self, messages: Sequence[Message]) -> None:
        """Deduplicate, decode and run user code on messages of this interval, in order.

        The per-record path of the whole runtime: each message's fields are read once,
        and nothing is allocated per record beyond the record itself and its effects."""
        if not messages:
            return
        self._touch()
        deps = self.deps
        counters = deps.counters
        # 1. Record ids (and the injector's late mark) from the headers.
        rids: list[bytes] = []
        lates: dict[int, bytes] = {}
        id_bytes = ids.ID_BYTES
        for i, m in enumerate(messages):
            rid: Any = None
            for name, hval in m.headers() or ():  # type: ignore[str-unpack]
                if name == ID_HEADER:
                    rid = hval
                elif name == LATE_HEADER:
                    lates[i] = hval if isinstance(hval, bytes) else b""
            if rid.__class__ is not bytes or len(rid) != id_bytes:
                rid = ids.from_position(m.topic() or "", m.partition() or 0, m.offset() or 0)
            rids.append(rid)
        self._advance_positions(messages)
        # 2. Drop duplicates; route late records; collect the keys to load.
        dup = self._duplicates(rids) if deps.exactly_once else None
        batch_seen = self.batch_seen
        todo: list[tuple[Message, bytes, str | None]] = []
        keys: set[str] = set()
        for i, m in enumerate(messages):
            rid = rids[i]
            if dup is not None and dup[i]:
                counters.duplicates += 1
                continue
            batch_seen.add(rid)
            if i in lates:
                self._late(self._incoming(m, rid, lates[i]))
                continue
            raw_key = m.key()
            try:
                key = None if raw_key is None else raw_key.decode()
            except UnicodeDecodeError:
                key = None
            if key is not None:
                keys.add(key)
            todo.append((m, rid, key))
        self._preload(keys)
        # 3. Decode and run user code, record by record.
        fault_at = len(todo) // 2 if deps.faults.enabled else -1
        comp = self.comp
        ctx = self.ctx
        inputs = deps.inputs
        seen = self.batch.seen
        new_record = _tuple_new
        apply = self._apply
        last_topic: str | None = None
        binding: InputBinding | None = None
        processed = 0
        timestamps = self.batch_timestamps if deps.record_latency else None
        arrivals, arrived = self.batch_arrivals, deps.clock()
        for n, (m, rid, key) in enumerate(todo):
            if n == fault_at:
                deps.faults.point("mid_batch", lambda: {"interval": str(self.id)})
            topic = m.topic()
            if topic is not last_topic:
                last_topic, binding = topic, inputs[topic or ""]
            assert binding is not None
            ts = m.timestamp()[1]
            try:
                if key is None:
                    raise SerializationError("record has no key" if m.key() is None else "key is not UTF-8")
                value = binding.serde.decode(m.value() or b"")
            except SerializationError as exc:
                self._dead_letter_message(self._incoming(m, rid, None), exc)
                continue
            record: Record = new_record(
                Record, (key, value, ts, rid, binding.stream, m.partition() or 0, m.offset() or 0)
            )
            processed += 1
            if timestamps is not None:
                timestamps.append(ts)
                arrivals.append(arrived)
            ctx.begin(key, rid, ts)
            try:
                comp.process_record(ctx, record)
            except Exception as exc:  # user code failed: dead-letter the record, go on
                self._restore(key)
                self._dead_letter_record(record, exc)
                continue
            if not apply(key, ctx.effects()):
                self._restore(key)
                self._dead_letter_record(record, self._failed_state)
                continue
            seen[rid] = ts
        counters.records += processed
        self.batch_records += len(messages)

    def _advance_positions(self, messages: Sequence[Message]) -> None:
        """The batch's input positions: one past each input topic's last message (the
        messages are of one partition index, in offset order per topic)."""
        positions = self.batch.positions
        wanted = len(self.deps.inputs)
        done: set[str] = set()
        for m in reversed(messages):
            topic = m.topic() or ""
            if topic not in done:
                done.add(topic)
                positions[position_field(topic, m.partition() or 0)] = (m.offset() or 0) + 1
                if len(done) == wanted:
                    break
        self.positions.update(positions)

    @staticmethod
    def _incoming(m: Message, rid: bytes, late: bytes | None) -> Incoming:
        return Incoming(
            m.topic() or "",
            m.partition() or 0,
            m.offset() or 0,
            m.key(),
            m.value() or b"",
            m.timestamp()[1],
            rid,
            late,
        )

    def _duplicates(self, rids: list[bytes]) -> list[bool]:
        maybe = self.bloom.contains_many(rids)
        in_batch = self.batch_seen
        result = [False] * len(rids)
        check: list[int] = []
        seen_here: set[bytes] = set()
        for i, (rid, m) in enumerate(zip(rids, maybe, strict=True)):
            if rid in in_batch or rid in seen_here:
                result[i] = True
            elif m:
                check.append(i)
            seen_here.add(rid)
        if check:
            self.deps.counters.bloom_maybe += len(check)
            confirmed = self.deps.store.seen(self.id, [rids[i] for i in check])
            for i, hit in zip(check, confirmed, strict=True):
                result[i] = hit
        return result

    def _late(self, inc: Incoming) -> None:
        """A record an injector let through behind its watermark: route or drop it, once."""
        self.deps.counters.late_records += 1
        self.batch.seen[inc.id] = inc.timestamp
        if not self.deps.late_topic:
            return
        headers = (
            (LATE_HEADER, inc.late or b""),
            ("mw-source-topic", inc.topic.encode()),
            ("mw-source-partition", str(inc.partition).encode()),
            ("mw-source-offset", str(inc.offset).encode()),
        )
        pid = ids.derive(inc.id, LATE_INDEX)
        self.batch.productions.append(
            Production(pid, self.deps.late_topic, inc.key, inc.value, max(inc.timestamp, 0), headers)
        )

    # -- dead letters --------------------------------------------------------------------

    def _dead_letter_message(self, inc: Incoming, exc: BaseException) -> None:
        headers = (
            ("mw-source-topic", inc.topic.encode()),
            ("mw-source-partition", str(inc.partition).encode()),
            ("mw-source-offset", str(inc.offset).encode()),
            ("mw-error", f"{type(exc).__name__}: {exc}".encode()[:4000]),
            ("mw-source-id", inc.id),
        )
        self._add_dead_letter(inc.id, inc.key, inc.value, inc.timestamp, headers, inc.topic)

    def _dead_letter_record(self, record: Record, exc: BaseException) -> None:
        topic = next(t for t, b in self.deps.inputs.items() if b.stream == record.stream)
        headers = (
            ("mw-source-topic", topic.encode()),
            ("mw-source-partition", str(record.partition).encode()),
            ("mw-source-offset", str(record.offset).encode()),
            ("mw-error", f"{type(exc).__name__}: {exc}".encode()[:4000]),
            ("mw-source-id", record.id),
        )
        serde = self.deps.inputs[topic].serde
        try:
            value = serde.encode(record.value)
        except SerializationError:
            value = repr(record.value).encode()
        self._add_dead_letter(record.id, record.key.encode(), value, record.timestamp, headers, topic)

    def _add_dead_letter(
        self,
        rid: bytes,
        key: bytes | None,
        value: bytes,
        ts: int,
        headers: tuple[tuple[str, bytes], ...],
        source: str,
    ) -> None:
        self.deps.counters.dead_letters += 1
        self.batch.seen[rid] = ts
        if self.deps.unsafe_drop_dead_letters:
            return
        pid = ids.derive(rid, DLQ_INDEX)
        self.batch.productions.append(
            Production(pid, self.deps.dead_letter_topic, key, value, max(ts, 0), headers)
        )
        self.deps.on_error(
            "dead_letter",
            {"source": source, "error": headers[3][1].decode(errors="replace")},
        )

    # -- effects -------------------------------------------------------------------------

    def _apply(self, key: str, eff: Effects) -> bool:
        """Merge one successful call's effects into the batch.

        State is encoded here, per call, so a value the codec cannot encode fails the
        call that stored it (which then becomes a dead letter) rather than the commit.
        Returns False (and applies nothing) if the state cannot be encoded.
        """
        value = eff.state
        if value is not _UNSET:
            try:
                encoded = None if value is None else self._encode_state(value)
            except Exception as exc:
                codec = type(self.deps.codec).__name__
                self._failed_state = SerializationError(
                    f"state of key {key!r} cannot be encoded by {codec}: {exc}"
                )
                return False
            self.cache[key] = value
            self.batch.state[key.encode()] = encoded
        for op in eff.timer_ops:
            fld = field_of(key, op.tag)
            if op.timestamp is None:
                self.timers.clear(key, op.tag)
                self.batch.timers[fld] = None
            else:
                entry = TimerEntry(key, op.tag, op.timestamp, op.domain, op.set_id)
                self.timers.set(entry)
                self.batch.timers[fld] = encode_entry(entry)
        if eff.productions:
            if self._weak:
                self.weak_buffer.extend(eff.productions)
            else:
                self.batch.productions += eff.productions
        if eff.late_productions:
            self.deps.counters.late_productions += eff.late_productions
        return True

    def _restore(self, key: str) -> None:
        """Undo what a failed call did to the cached state object (it may have mutated it
        in place): back to the batch's last good bytes, or to the store's."""
        raw = self.batch.state.get(key.encode(), _ABSENT)
        if raw is _ABSENT:
            self.cache.pop(key, None)  # reloaded from the store when next needed
        else:
            self.cache[key] = None if raw is None else self.deps.codec.decode(raw)

    # -- timers --------------------------------------------------------------------------

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
        self._touch()
        fired = 0
        delete = not self.deps.unsafe_keep_fired_timers
        for entry in self.timers.due(domain, limit_ts):
            fired += 1
            self.deps.faults.point("in_timer", lambda: {"interval": str(self.id)})
            fid = ids.timer_firing_id(entry.set_id, entry.tag, entry.timestamp)
            self._state_for(entry.key)
            self.ctx.begin(entry.key, fid, entry.timestamp)
            timer = Timer(entry.key, entry.tag, entry.timestamp, domain)
            fld = field_of(entry.key, entry.tag)
            try:
                self.comp.process_timer(self.ctx, timer)
            except Exception as exc:
                self._restore(entry.key)
                if delete:
                    self.batch.timers[fld] = None
                self._dead_letter_timer(entry, fid, exc)
            else:
                # The firing's deletion goes in with its effects (a re-set in the
                # callback, applied after, wins).
                if delete:
                    self.batch.timers[fld] = None
                if not self._apply(entry.key, self.ctx.effects()):
                    self._restore(entry.key)
                    self._dead_letter_timer(entry, fid, self._failed_state)
            if fired >= max_firings:
                break
        self.deps.counters.timers_fired += fired
        self.batch_records += fired
        return fired

    def _dead_letter_timer(self, entry: TimerEntry, fid: bytes, exc: BaseException) -> None:
        headers = (
            ("mw-source-topic", b""),
            ("mw-timer-tag", entry.tag.encode()),
            ("mw-timer-timestamp", str(entry.timestamp).encode()),
            ("mw-error", f"{type(exc).__name__}: {exc}".encode()[:4000]),
        )
        self.deps.counters.dead_letters += 1
        if self.deps.unsafe_drop_dead_letters:
            return
        self.batch.productions.append(
            Production(
                ids.derive(fid, DLQ_INDEX),
                self.deps.dead_letter_topic,
                entry.key.encode(),
                b"",
                max(entry.timestamp, 0),
                headers,
            )
        )

    # -- commit --------------------------------------------------------------------------

    def prepare(self) -> Checkpoint:
        """The checkpoint of the current batch. Call once per batch."""
        cp = self.batch
        if cp.productions:
            cp.pending[self._new_batch_key()] = cp.productions
        # Weak productions not acknowledged by now are checkpointed, like strong ones:
        # those already sent and those made since the last send (e.g. by timers).
        self.flush_weak()
        if not self.deps.unsafe_unchecked_weak:
            cp.pending.update(self.outbox.weak_for_checkpoint(self._new_batch_key))
        deletes, segments, handed = self.outbox.for_checkpoint()
        cp.acked = deletes
        seg_key = None
        if segments:
            seg_key = self._new_batch_key()
            cp.segments[seg_key] = encode_segments(segments)
        for key in handed:
            cp.segments[key] = None
        self._outbox_ck = (len(self.outbox.acked), seg_key, segments, len(handed))
        cp.records = self.batch_records
        cp.commit_id = self._new_batch_key()
        floor = self.watermark - self.deps.seen_gc_slack_ms
        if self.watermark > MIN_WATERMARK and floor >= self.seen_gc_done + 1000:
            cp.seen_gc_below = floor
        return cp

    def committed(self, cp: Checkpoint, commits: int) -> None:
        """The checkpoint is durable: its productions may now be sent."""
        self.commits = commits
        self.committed_positions.update(cp.positions)
        if cp.seen_gc_below is not None:
            self.seen_gc_done = cp.seen_gc_below
        outbox = self.outbox
        outbox.checkpointed(*self._outbox_ck)
        self._outbox_ck = (0, None, [], 0)
        if not self.deps.unsafe_unchecked_weak:
            outbox.weak_committed()
        if cp.productions:
            for batch_key, productions in cp.pending.items():
                if productions is cp.productions:
                    outbox.committed(batch_key, productions, commits)
        self._reset_batch()
        self.bloom.add_many(list(cp.seen))
        if self.bloom.full:
            # Past its capacity the false-positive rate climbs (more Redis look-ups):
            # rebuild at twice the size from the durable seen set.
            # Seen ids forgotten by watermark leave the set; the filter is rebuilt
            # from what is left, so its size follows the live set, not the run.
            seen = self.deps.store.seen_ids(self.id)
            self.bloom = BloomFilter(capacity=max(BLOOM_MIN_CAPACITY, 2 * len(seen)))
            self.bloom.add_many(seen)
        if len(self.cache) > self.deps.max_cache_keys:
            for key in list(self.cache)[: len(self.cache) - self.deps.max_cache_keys]:
                del self.cache[key]

    def flush_weak(self) -> None:
        """Hand the weak productions of the last calls to the outbox for sending."""
        if self.weak_buffer:
            self.outbox.send_weak(self.weak_buffer)
            self.weak_buffer = []
