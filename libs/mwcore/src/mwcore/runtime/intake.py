"""How consumed messages of one key interval become processed records: the per-record
path of the whole runtime (semantics section 2, steps 1 and 2).

For a chunk of messages (one partition index, in offset order per topic):

1. record ids (and an injector's late mark) are read from the headers by the core's
   reader (``envelope.py``); a message without an id gets one
   derived from its position, and so does one whose id does not verify with the
   pipeline secret (``api/signing.py``: it is a dead letter ``bad_id``, never
   deduplicated under the id it claims);
2. the batch's input positions move past the last message of each topic;
3. duplicates are dropped (``dedup.py``), and the rest screened by the core's screener
   (``screening.py``): records an injector let through late are routed to
   the late stream (or dropped), counted, and marked seen; keys are decoded, and
   values; a message that has no key, a key or timestamp out of the kit's bounds
   (``limits.py``), or a value that does not decode becomes a dead letter, and is seen;
4. the records' state is loaded in one read;
5. user code runs, record by record (the core's ``Applier.records``); a record it fails
   on becomes a dead letter, and is seen.

Each message's fields are read once, and nothing is allocated per record beyond the
record itself and its effects.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mwcore.api.record import Record
from mwcore.controls import SAFE, NegativeControls
from mwcore.errors import InternalError, InvalidRecord
from mwcore.limits import MAX_TIMESTAMP, MIN_TIMESTAMP
from mwcore.runtime import dead_letters, screening
from mwcore.runtime.dead_letters import Incoming
from mwcore.runtime.dedup import SeenIds
from mwcore.runtime.effects import Applier
from mwcore.runtime.envelope import IdReader
from mwcore.runtime.faults import Faults
from mwcore.runtime.screening import Bindings, Screener
from mwcore.runtime.state_cache import StateCache
from mwcore.serde.avro import AvroSerde
from mwcore.store.checkpoint import Checkpoint
from mwcore.store.checkpoint_wire import position_field
from mwcore.transport.message import Message


@dataclass
class InputBinding:
    """How messages of one input topic become records."""

    stream: str
    serde: AvroSerde
    decode: Callable[[bytes], Any] | None = None  # None: the serde's (else the core's decoder)
    write: Callable[[Any], Any] | None = None  # a typed input's value back to a dict (Typed.write)

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
    reader: IdReader  # the core's: ids checked with the pipeline secret, if there is one
    screener: Screener  # the core's
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
    _bindings: Bindings = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._bindings = {t: (b.stream, b.decode) for t, b in self.inputs.items()}  # type: ignore[misc]

    def process(self, messages: Sequence[Message], batch: OpenBatch, positions: dict[str, int]) -> None:
        if not messages:
            return
        batch.touch()
        counters = self.applier.counters
        cp = batch.checkpoint
        # 1. Record ids (and the injector's late mark) from the headers.
        rids, lates, forged, schema_ids, headers = self.reader.read(messages)
        self._advance_positions(messages, cp, positions)
        # 2. Drop duplicates; set aside what is no record; decode the rest.
        dup = self.seen.duplicates(rids, batch.seen) if self.exactly_once else None
        duplicates, early, items, keys = self.screener.screen(
            messages, rids, dup, forged, lates, schema_ids, headers, batch.seen, self._bindings
        )
        counters.duplicates += duplicates
        for i, why in early:
            m = messages[i]
            if why == screening.LATE:
                self._late(_incoming(m, rids[i], lates[i]), cp)
            elif why == screening.BAD_ID:
                why = "its id does not verify with the pipeline secret (MW_ID_SECRET)"
                self.dead_letter(_incoming(m, rids[i], None), InvalidRecord("bad_id", why), cp)
            else:
                ts = m.timestamp()[1]
                why = f"{ts} is outside {MIN_TIMESTAMP} to {MAX_TIMESTAMP}"
                self.dead_letter(_incoming(m, rids[i], None), InvalidRecord("bad_timestamp", why), cp)
        self.cache.preload(keys)

        # 3. User code, record by record.
        def bad(i: int, exc: BaseException) -> None:  # no key, or a value that does not decode
            self.dead_letter(_incoming(messages[i], rids[i], None, schema_ids.get(i)), exc, cp)

        def failed(record: Record, exc: BaseException) -> None:  # user code failed on it
            self._dead_letter_record(record, exc, cp)

        def fault() -> None:
            self.faults.point("mid_batch", lambda: {"interval": self.name})

        latency = (batch.timestamps, batch.arrivals, self.clock()) if self.record_latency else None
        fault_at = len(items) // 2 if self.faults.enabled else -1
        counters.records += self.applier.records(items, cp, latency, fault_at, fault, bad, failed)
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
            binding = self.inputs[topic]
            plain = record.value if binding.write is None else binding.write(record.value)
            value = binding.serde.encode(plain)
        except Exception:  # (a typed value its type's writer cannot take back, too)
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
        event = "internal_error" if isinstance(exc, InternalError) else "dead_letter"
        self.on_error(event, {"source": inc.topic, "error": dead_letters.error_text(dead)})


def _incoming(m: Message, rid: bytes, late: bytes | None, schema_id: bytes | None = None) -> Incoming:
    return Incoming(
        m.topic() or "",
        m.partition() or 0,
        m.offset() or 0,
        m.key(),
        m.value() or b"",
        m.timestamp()[1],
        rid,
        late,
        schema_id,
    )
