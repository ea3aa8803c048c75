"""Run a computation in memory, as the runtime would, without Kafka or Redis.

For unit tests of user code (``mwcore.testing``), and for running a computation over
data already at hand (the batch runner, ``archive/batch.py``): records go through the
same Avro round trip, and calls through the same ``Applier`` (context, state codec,
state cache, timer queue) as in a worker, so what a computation does here is what it
does in the pipeline::

    h = Harness(Windower)
    h.send("queries", {"query": "a", ...}, timestamp=1_000, key="a")
    h.advance_watermark(2_000)          # fires event-time timers below 2,000, in order
    assert h.output("window_counts") == [...]

Each call is committed at once (its state encoded and stored, its productions kept).
It proves nothing about exactly-once delivery or fencing: the system tests do that
against a real broker and Redis.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from mwcore.api import ids
from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.api.computation import Computation
from mwcore.api.context import Encoder
from mwcore.api.record import Production, Record, TimeDomain
from mwcore.errors import SerializationError
from mwcore.runtime.counters import Counters
from mwcore.runtime.effects import Applier
from mwcore.runtime.state_cache import StateCache
from mwcore.runtime.timers import TimerQueue
from mwcore.serde.avro import AvroSerde, SchemaRegistry, find_schemas
from mwcore.store.checkpoint import Checkpoint, TimerEntry


class Produced(NamedTuple):
    """A production, decoded."""

    key: str
    value: Any
    timestamp: int
    id: bytes


@dataclass(frozen=True)
class Failure:
    """A record or timer whose processing raised (the runtime dead-letters it)."""

    key: str
    cause: str  # "record" or "timer:<tag>"
    timestamp: int
    error: BaseException


class Harness:
    """One computation, all keys, in memory. ``raise_errors=False`` records failures
    (as the runtime's dead letters) instead of raising them."""

    def __init__(
        self,
        computation: Computation | type[Computation],
        registry: SchemaRegistry | None = None,
        *,
        wall_ms: int = 0,
        raise_errors: bool = True,
    ) -> None:
        comp = computation() if isinstance(computation, type) else computation
        comp.validate()
        self.comp = comp
        self.registry = registry or SchemaRegistry.from_directory(find_schemas())
        self.codec = comp.state
        self.codec.bind(self.registry)
        self._inputs = {i.stream: (i, AvroSerde(self.registry, i.schema or "")) for i in comp.inputs}
        self._outputs = {o.stream: AvroSerde(self.registry, o.schema) for o in comp.outputs}
        self.wall_ms = wall_ms
        self.watermark = MIN_WATERMARK
        self.raise_errors = raise_errors
        self.failures: list[Failure] = []
        self.counters = Counters()
        self._stored: dict[bytes, bytes] = {}  # key -> encoded state, as committed
        self._produced: list[Production] = []  # encoded, as sent (topic: the stream)
        self._offsets = itertools.count()
        self._timers = TimerQueue()
        encoders: dict[str, tuple[str, Encoder]] = {s: (s, d.encode) for s, d in self._outputs.items()}
        cache = StateCache(self.codec, self._load, max_keys=sys.maxsize)
        self._applier = Applier(comp, cache, self._timers, encoders, lambda: self.wall_ms, self.counters)

    # -- input ---------------------------------------------------------------------------

    def send(
        self,
        stream: str,
        value: Any,
        timestamp: int,
        key: str | None = None,
        record_id: bytes | None = None,
        *,
        decoded: bool = False,
    ) -> None:
        """Process one record of input ``stream`` (keyed by the input's key extractor,
        else by ``key``). Event-time timers fire only on ``advance_watermark``. The value
        goes through an Avro round trip unless ``decoded`` says it came from Avro."""
        inp, serde = self._input(stream)
        if not decoded:
            value = serde.decode(serde.encode(value))  # what a worker would hand over
        if inp.key is not None:
            key = inp.key(value)
        if key is None:
            raise ValueError(f"a record of {stream!r} needs a key (its input has no key extractor)")
        rid = record_id or ids.random_id()
        record = Record(key, value, timestamp, rid, stream, 0, next(self._offsets))
        batch = Checkpoint()
        try:
            error = self._applier.record(record, batch)
        finally:
            self._commit(batch)
        if error is not None:
            self._fail(Failure(key, "record", timestamp, error))

    def send_encoded(
        self, stream: str, data: bytes, timestamp: int, key: str | None = None, record_id: bytes | None = None
    ) -> None:
        """``send`` a value as archived (Avro-encoded); one that does not decode is a
        failure, as the runtime dead-letters it."""
        try:
            value = self._input(stream)[1].decode(data)
        except SerializationError as exc:
            self._fail(Failure(key or "", "record", timestamp, exc))
            return
        self.send(stream, value, timestamp, key, record_id, decoded=True)

    def _input(self, stream: str) -> tuple[Any, AvroSerde]:
        try:
            return self._inputs[stream]
        except KeyError:
            raise KeyError(f"{stream!r} is not an input of {self.comp.name}") from None

    def advance_watermark(self, watermark: int) -> int:
        """Fire every event-time timer below ``watermark``, oldest first (those the
        callbacks set below it too); the number fired."""
        self.watermark = max(self.watermark, watermark)
        return self._fire(TimeDomain.EVENT, watermark)

    def advance_wall(self, ms: int) -> int:
        """Move the wall clock forward by ``ms`` and fire the wall-time timers due."""
        self.wall_ms += ms
        return self._fire(TimeDomain.WALL, self.wall_ms + 1)

    def finish(self) -> int:
        """The end of input: the watermark goes to the end of time."""
        return self.advance_watermark(MAX_WATERMARK)

    def reset_time(self) -> None:
        """Drop pending timers and go back to the beginning of event time (to run keys
        that have nothing to do with each other one after another)."""
        self._timers.clear_all()
        self.watermark = MIN_WATERMARK

    # -- what happened -------------------------------------------------------------------

    def output(self, stream: str) -> list[Produced]:
        if stream not in self._outputs:
            raise KeyError(f"{stream!r} is not an output of {self.comp.name}")
        decode = self._outputs[stream].decode
        return [
            Produced((p.key or b"").decode(), decode(p.value), p.timestamp, p.id)
            for p in self._produced
            if p.topic == stream
        ]

    def values(self, stream: str) -> list[Any]:
        return [p.value for p in self.output(stream)]

    def take_productions(self) -> list[Production]:
        """Every production since the last take, encoded as sent (``topic``: the stream)."""
        out, self._produced = self._produced, []
        return out

    def take_failures(self) -> list[Failure]:
        out, self.failures = self.failures, []
        return out

    def state(self, key: str) -> Any:
        raw = self._stored.get(key.encode())
        return None if raw is None else self.codec.decode(raw)

    def keys(self) -> list[str]:
        return sorted(k.decode() for k in self._stored)

    def pending_timers(self) -> int:
        return len(self._timers)

    # -- the runtime's rules -------------------------------------------------------------

    def _load(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self._stored.get(k) for k in keys]

    def _fire(self, domain: TimeDomain, limit: int) -> int:
        batch = Checkpoint()
        try:
            return self._applier.fire(domain, limit, batch, self._timer_failed)
        finally:
            self._commit(batch)

    def _timer_failed(self, entry: TimerEntry, firing_id: bytes, error: Exception) -> None:
        self._fail(Failure(entry.key, f"timer:{entry.tag}", entry.timestamp, error))

    def _fail(self, failure: Failure) -> None:
        if self.raise_errors:
            raise failure.error
        self.failures.append(failure)

    def _commit(self, batch: Checkpoint) -> None:
        """What the runtime's checkpoint would store, stored at once. The next call reads
        state decoded from what was stored: a change user code made to a state object in
        place, without ``state.set``, is not kept (in a worker it would be lost at the next
        takeover or cache eviction)."""
        for k, v in batch.state.items():
            if v is None:
                self._stored.pop(k, None)
            else:
                self._stored[k] = v
        self._produced += batch.productions
        self._produced += self._applier.take_weak()
        self._applier.cache.values.clear()
