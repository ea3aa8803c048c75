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

from mwcore import ids
from mwcore.bloom import BloomFilter
from mwcore.checkpoint import Checkpoint, Snapshot, position_field
from mwcore.codecs import StateCodec
from mwcore.computation import Computation
from mwcore.context import Context, Effects
from mwcore.errors import SerializationError
from mwcore.faults import NO_FAULTS, Faults
from mwcore.record import ID_HEADER, Production, Record, TimeDomain, Timer
from mwcore.serde import AvroSerde
from mwcore.store import CheckpointStore, IntervalId
from mwcore.timers import TimerEntry, TimerQueue, encode_entry, field_of

_ABSENT: Any = object()


class Incoming(NamedTuple):
    """The fields of a consumed Kafka message, read once."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int
    id: bytes


def _incoming(m: Message) -> Incoming:
    topic = m.topic() or ""
    partition = m.partition() or 0
    offset = m.offset() or 0
    rid = None
    for name, value in m.headers() or ():  # type: ignore[str-unpack]
        if name == ID_HEADER and isinstance(value, bytes) and len(value) == ids.ID_BYTES:
            rid = value
            break
    if rid is None:
        rid = ids.from_position(topic, partition, offset)
    return Incoming(topic, partition, offset, m.key(), m.value() or b"", m.timestamp()[1], rid)


DLQ_INDEX = 0xFFFF_FFFF


@dataclass
class Counters:
    records: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    timers_fired: int = 0
    late_productions: int = 0
    commits: int = 0
    fenced: int = 0
    bloom_maybe: int = 0


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
    exactly_once: bool = True
    max_cache_keys: int = 100_000
    faults: Faults = NO_FAULTS
    counters: Counters = field(default_factory=Counters)
    on_error: Callable[[str, dict[str, Any]], None] = lambda event, info: None
    clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000


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
        self.bloom = BloomFilter(capacity=max(200_000, 2 * len(snapshot.seen)))
        self.bloom.add_many(snapshot.seen)
        self.commits = snapshot.commits
        # Productions checkpointed as pending: resend those of the snapshot first.
        self.unsent: list[Production] = list(snapshot.pending)
        self.pending: dict[bytes, Production] = {p.id: p for p in snapshot.pending}
        self.weak_inflight: dict[bytes, Production] = {}
        self.acked: list[bytes] = []
        self.failed: list[Production] = []
        self._acked_at = 0.0
        self.ctx = Context(deps.encoders, self._state_for, deps.clock)
        self._reset_batch()

    # -- batch bookkeeping -------------------------------------------------------------

    def _reset_batch(self) -> None:
        self.batch = Checkpoint()
        self.dirty: set[str] = set()
        self.batch_seen: set[bytes] = set()
        self.batch_started: float | None = None
        self.batch_records = 0

    def _touch(self) -> None:
        if self.batch_started is None:
            self.batch_started = time.monotonic()

    def due(self, now: float, max_records: int, max_delay_s: float) -> bool:
        if self.batch_records >= max_records:
            return True
        started = self.batch_started
        if started is None:
            return bool(self.acked) and not self.batch.productions and now - self._acked_at >= max_delay_s
        return now - started >= max_delay_s

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
        """Deduplicate, decode and run user code on messages of this interval, in order."""
        if not messages:
            return
        self._touch()
        deps = self.deps
        counters = deps.counters
        incoming = [_incoming(m) for m in messages]
        rids = [i.id for i in incoming]
        dup = self._duplicates(rids) if deps.exactly_once else [False] * len(rids)

        positions = self.batch.positions
        fresh: list[Incoming] = []
        for inc, is_dup in zip(incoming, dup, strict=True):
            positions[position_field(inc.topic, inc.partition)] = inc.offset + 1
            if is_dup:
                counters.duplicates += 1
                continue
            self.batch_seen.add(inc.id)
            fresh.append(inc)
        self.positions.update(positions)

        records: list[Record] = []
        for inc in fresh:
            record = self._decode(inc)
            if record is not None:
                records.append(record)
        self._preload({r.key for r in records})

        fault_at = len(records) // 2 if deps.faults.enabled else -1
        comp = self.comp
        ctx = self.ctx
        for i, record in enumerate(records):
            if i == fault_at:
                deps.faults.point("mid_batch", lambda: {"interval": str(self.id)})
            ctx.begin(record.key, record.id, record.timestamp)
            try:
                comp.process_record(ctx, record)
            except Exception as exc:  # user code failed: dead-letter the record, go on
                self._dead_letter_record(record, exc)
                continue
            self.batch.seen[record.id] = record.timestamp
            self._apply(record.key, ctx.effects())
        counters.records += len(records)
        self.batch_records += len(messages)

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

    def _decode(self, inc: Incoming) -> Record | None:
        binding = self.deps.inputs[inc.topic]
        try:
            if inc.key is None:
                raise SerializationError("record has no key")
            key = inc.key.decode()
            value = binding.serde.decode(inc.value)
        except (SerializationError, UnicodeDecodeError) as exc:
            self._dead_letter_message(inc, exc)
            return None
        return Record(key, value, inc.timestamp, inc.id, binding.stream, inc.partition, inc.offset)

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
        pid = ids.derive(rid, DLQ_INDEX)
        self.batch.productions.append(
            Production(pid, self.deps.dead_letter_topic, key, value, max(ts, 0), headers)
        )
        self.deps.on_error(
            "dead_letter",
            {"source": source, "error": headers[3][1].decode(errors="replace")},
        )

    # -- effects -------------------------------------------------------------------------

    def _apply(self, key: str, eff: Effects) -> None:
        if eff.state_changed:
            self.cache[key] = eff.state
            self.dirty.add(key)
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
            if self.comp.options.productions == "weak":
                self.unsent.extend(eff.productions)
                for p in eff.productions:
                    self.weak_inflight[p.id] = p
            else:
                self.batch.productions.extend(eff.productions)
        if eff.late_productions:
            self.deps.counters.late_productions += eff.late_productions

    # -- timers --------------------------------------------------------------------------

    def fire_timers(self, watermark: int, now_ms: int) -> int:
        """Fire event timers below the input watermark and wall timers up to now."""
        fired = self._fire(TimeDomain.EVENT, watermark)
        fired += self._fire(TimeDomain.WALL, now_ms + 1)
        return fired

    def _fire(self, domain: TimeDomain, limit: int) -> int:
        oldest = self.timers.oldest(domain)
        if oldest is None or oldest >= limit:
            return 0
        self._touch()
        fired = 0
        for entry in self.timers.due(domain, limit):
            fired += 1
            self.deps.faults.point("in_timer", lambda: {"interval": str(self.id)})
            fid = ids.timer_firing_id(entry.set_id, entry.tag, entry.timestamp)
            self.batch.timers[field_of(entry.key, entry.tag)] = None
            self._state_for(entry.key)
            self.ctx.begin(entry.key, fid, entry.timestamp)
            timer = Timer(entry.key, entry.tag, entry.timestamp, domain)
            try:
                self.comp.process_timer(self.ctx, timer)
            except Exception as exc:
                self._dead_letter_timer(entry, fid, exc)
                continue
            self._apply(entry.key, self.ctx.effects())
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
        """The checkpoint of the current batch (state encoded now, once per key)."""
        cp = self.batch
        encode = self.deps.codec.encode
        for key in self.dirty:
            value = self.cache[key]
            cp.state[key.encode()] = None if value is None else encode(value)
        # Weak productions not acknowledged by now become pending, like strong ones.
        for p in self.weak_inflight.values():
            if p.id not in self.pending:
                cp.productions.append(p)
        cp.acked = list(self.acked)
        cp.records = self.batch_records
        return cp

    def committed(self, cp: Checkpoint, commits: int) -> None:
        """The checkpoint is durable: its productions may now be sent."""
        self.commits = commits
        self.bloom.add_many(list(cp.seen))
        del self.acked[: len(cp.acked)]
        for p in cp.productions:
            self.pending[p.id] = p
            if p.id not in self.weak_inflight:
                self.unsent.append(p)
        self.weak_inflight.clear()
        self._reset_batch()
        if len(self.cache) > self.deps.max_cache_keys:
            for key in list(self.cache)[: len(self.cache) - self.deps.max_cache_keys]:
                del self.cache[key]

    def take_unsent(self) -> list[Production]:
        out, self.unsent = self.unsent, []
        if self.failed:
            out.extend(self.failed)
            self.failed = []
        return out

    def delivered(self, production: Production, error: object) -> None:
        """Kafka's delivery report for a production of this interval."""
        if error is not None:
            self.failed.append(production)  # resend it; its id makes a duplicate harmless
            return
        if production.id in self.pending:
            del self.pending[production.id]
            if not self.acked:
                self._acked_at = time.monotonic()
            self.acked.append(production.id)
        else:
            self.weak_inflight.pop(production.id, None)

    @property
    def in_flight(self) -> int:
        return len(self.pending) + len(self.weak_inflight)
