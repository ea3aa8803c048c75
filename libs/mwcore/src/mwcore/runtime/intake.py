"""How consumed messages of one key interval become processed records: the per-record
path of the whole runtime (semantics section 2, steps 1 and 2).

For a chunk of messages (one partition index, in offset order per topic):

1. record ids (and an injector's late mark) are read from the headers
   (``envelope.py``, in Rust on the native consumer); a message without an id gets one
   derived from its position, and so does one whose id does not verify with the
   pipeline secret (``api/signing.py``: it is a dead letter ``bad_id``, never
   deduplicated under the id it claims);
2. the batch's input positions move past the last message of each topic;
3. duplicates are dropped (``dedup.py``); records an injector let through late are
   routed to the late stream (or dropped), counted, and marked seen;
4. keys are decoded and their state loaded in one read;
5. each value is decoded and user code runs (``Applier.record``); a record that has no
   key, a key or timestamp out of the kit's bounds (``limits.py``), does not decode, or
   fails in user code becomes a dead letter, and is seen.

Each message's fields are read once, and nothing is allocated per record beyond the
record itself and its effects.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mwcore.api.record import Record
from mwcore.api.signing import UNSIGNED, Signer
from mwcore.controls import SAFE, NegativeControls
from mwcore.errors import InvalidRecord, SerializationError
from mwcore.limits import MAX_KEY_BYTES, MAX_TIMESTAMP, MIN_TIMESTAMP
from mwcore.runtime import dead_letters
from mwcore.runtime.dead_letters import Incoming
from mwcore.runtime.dedup import SeenIds
from mwcore.runtime.effects import Applier
from mwcore.runtime.envelope import IdReader, id_reader
from mwcore.runtime.faults import Faults
from mwcore.runtime.state_cache import StateCache
from mwcore.serde.avro import AvroSerde
from mwcore.store.checkpoint import Checkpoint, position_field
from mwcore.transport.message import Message

_tuple_new = tuple.__new__  # builds a NamedTuple without its Python-level __new__


@dataclass
class InputBinding:
    """How messages of one input topic become records."""

    stream: str
    serde: AvroSerde
    decode: Callable[[bytes], Any] | None = None  # None: the serde's (native_codecs: the native core's)

    def __post_init__(self) -> None:
        if self.decode is None:
            self.decode = self.serde.decode


@dataclass(slots=True)
class OpenBatch:
    """The batch being built: the checkpoint it will be, and what is known of it."""

    checkpoint: Checkpoint = field(default_factory=Checkpoint)
    seen: set[bytes] = field(default_factory=set)  # ids of its records (dedup within it)
    opened_at: float | None = None  # when it got its first record or firing (monotonic)
    records: int = 0  # records and firings in it
    timestamps: list[int] = field(default_factory=list)  # when latency is recorded: each
    arrivals: list[int] = field(default_factory=list)  # record's timestamp, and its arrival

    def touch(self) -> None:
        if self.opened_at is None:
            self.opened_at = time.monotonic()


@dataclass
class Intake:
    """The record path of one interval; what it writes goes to the ``OpenBatch`` given."""

    name: str  # the interval, for fault points
    inputs: dict[str, InputBinding]  # topic -> binding
    seen: SeenIds
    cache: StateCache
    applier: Applier
    dead_letter_topic: str
    late_topic: str  # "": drop late records (counted)
    exactly_once: bool
    faults: Faults
    record_latency: bool
    clock: Callable[[], int]  # wall ms
    on_error: Callable[[str, dict[str, Any]], None]  # told of each dead letter (the worker logs it)
    controls: NegativeControls = SAFE  # drop_dead_letters: a bad record leaves no dead letter
    signer: Signer = UNSIGNED  # with a pipeline secret: every record id must verify
    read_ids: IdReader | None = None  # step 1 (envelope.py); None: the reference, with signer
    _read: IdReader = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._read = self.read_ids or id_reader(self.signer)

    def process(self, messages: Sequence[Message], batch: OpenBatch, positions: dict[str, int]) -> None:
        if not messages:
            return
        batch.touch()
        counters = self.applier.counters
        # 1. Record ids (and the injector's late mark) from the headers.
        rids, lates, forged = self._read(messages)
        self._advance_positions(messages, batch.checkpoint, positions)
        # 2. Drop duplicates; route late records; collect the keys to load.
        batch_seen = batch.seen
        dup = self.seen.duplicates(rids, batch_seen) if self.exactly_once else None
        todo: list[tuple[Message, bytes, str | None, int]] = []
        keys: set[str] = set()
        for i, m in enumerate(messages):
            rid = rids[i]
            if dup is not None and dup[i]:
                counters.duplicates += 1
                continue
            batch_seen.add(rid)
            if i in forged:
                why = "its id does not verify with the pipeline secret (MW_ID_SECRET)"
                self.dead_letter(_incoming(m, rid, None), InvalidRecord("bad_id", why), batch.checkpoint)
                continue
            ts = m.timestamp()[1]
            if not MIN_TIMESTAMP <= ts <= MAX_TIMESTAMP:
                why = f"{ts} is outside {MIN_TIMESTAMP} to {MAX_TIMESTAMP}"
                self.dead_letter(
                    _incoming(m, rid, None), InvalidRecord("bad_timestamp", why), batch.checkpoint
                )
                continue
            if i in lates:
                self._late(_incoming(m, rid, lates[i]), batch.checkpoint)
                continue
            raw_key = m.key()
            try:
                key = None if raw_key is None or len(raw_key) > MAX_KEY_BYTES else raw_key.decode()
            except UnicodeDecodeError:
                key = None
            if key is not None:
                keys.add(key)
            todo.append((m, rid, key, ts))
        self.cache.preload(keys)
        # 3. Decode and run user code, record by record.
        fault_at = len(todo) // 2 if self.faults.enabled else -1
        inputs = self.inputs
        cp = batch.checkpoint
        seen = cp.seen
        new_record = _tuple_new
        run = self.applier.record
        last_topic: str | None = None
        binding: InputBinding | None = None
        processed = 0
        timestamps = batch.timestamps if self.record_latency else None
        arrivals, arrived = batch.arrivals, self.clock()
        for n, (m, rid, key, ts) in enumerate(todo):
            if n == fault_at:
                self.faults.point("mid_batch", lambda: {"interval": self.name})
            topic = m.topic()
            if topic is not last_topic:
                last_topic, binding = topic, inputs[topic or ""]
            assert binding is not None
            try:
                if key is None:
                    raise _key_error(m.key())
                value = binding.decode(m.value() or b"")  # type: ignore[misc]
            except SerializationError as exc:
                self.dead_letter(_incoming(m, rid, None), exc, cp)
                continue
            record: Record = new_record(
                Record, (key, value, ts, rid, binding.stream, m.partition() or 0, m.offset() or 0)
            )
            processed += 1
            if timestamps is not None:
                timestamps.append(ts)
                arrivals.append(arrived)
            error = run(record, cp)
            if error is not None:  # user code failed, or its state cannot be encoded
                self._dead_letter_record(record, error, cp)
                continue
            seen[rid] = ts
        counters.records += processed
        batch.records += len(messages)

    def _advance_positions(
        self, messages: Sequence[Message], cp: Checkpoint, positions: dict[str, int]
    ) -> None:
        """The batch's input positions: one past each input topic's last message."""
        moved = cp.positions
        wanted = len(self.inputs)
        done: set[str] = set()
        for m in reversed(messages):
            topic = m.topic() or ""
            if topic not in done:
                done.add(topic)
                moved[position_field(topic, m.partition() or 0)] = (m.offset() or 0) + 1
                if len(done) == wanted:
                    break
        positions.update(moved)

    def _late(self, inc: Incoming, cp: Checkpoint) -> None:
        """A record an injector let through behind its watermark: route or drop it, once."""
        self.applier.counters.late_records += 1
        cp.seen[inc.id] = inc.timestamp
        if self.late_topic:
            cp.productions.append(dead_letters.late_copy(self.late_topic, inc))

    def _dead_letter_record(self, record: Record, exc: BaseException, cp: Checkpoint) -> None:
        """A record that decoded: its dead letter holds it re-encoded with the reader schema."""
        topic = next(t for t, b in self.inputs.items() if b.stream == record.stream)
        try:
            value = self.inputs[topic].serde.encode(record.value)
        except SerializationError:
            value = repr(record.value).encode()
        key = record.key.encode()
        inc = Incoming(topic, record.partition, record.offset, key, value, record.timestamp, record.id, None)
        self.dead_letter(inc, exc, cp)

    def dead_letter(self, inc: Incoming, exc: BaseException, cp: Checkpoint) -> None:
        """A record that cannot be processed: seen (never again), and dead-lettered."""
        self.applier.counters.dead_letters += 1
        now = self.clock()
        ts = inc.timestamp if MIN_TIMESTAMP <= inc.timestamp <= now else now  # forgotten in time
        cp.seen[inc.id] = ts
        if self.controls.drop_dead_letters:
            return
        dead = dead_letters.dead_letter(self.dead_letter_topic, inc, exc, now)
        cp.productions.append(dead)
        self.on_error("dead_letter", {"source": inc.topic, "error": dead_letters.error_text(dead)})


def _key_error(raw: bytes | None) -> SerializationError:
    if raw is None:
        return SerializationError("record has no key")
    if len(raw) > MAX_KEY_BYTES:
        return InvalidRecord("key_too_long", f"{len(raw)} bytes, more than {MAX_KEY_BYTES}")
    return SerializationError("key is not UTF-8")


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
