"""Run a computation in memory, as the runtime would, without Kafka or Redis.

The engine under the batch runner (``archive/batch.py``: keys over archived records,
``mw batch``) and the test harness (``runtime/harness.py``, ``mwcore.testing``): calls go
through the same ``Applier`` (context, state codec, state cache, timer queue) as in a
worker, so what a computation does here is what it does in the pipeline. Each call is
committed at once (its state encoded and stored, its productions kept); a call that
raises is a ``Failure`` (the runtime dead-letters it) and leaves nothing behind.

It proves nothing about exactly-once delivery or fencing: the system tests do that
against a real broker and Redis.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.api.computation import Computation, Input, state_codec_of
from mwcore.api.context import Encoder
from mwcore.api.headers import Headers
from mwcore.api.record import Production, Record, TimeDomain
from mwcore.errors import SerializationError
from mwcore.runtime.counters import Counters
from mwcore.runtime.effects import Applier
from mwcore.runtime.layout import stream_types
from mwcore.runtime.screening import out_of_bounds
from mwcore.runtime.state_cache import StateCache
from mwcore.runtime.timers import TimerQueue
from mwcore.serde import typed
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.framing import SINGLE_OBJECT, Framing
from mwcore.store.checkpoint import Checkpoint, TimerEntry


@dataclass(frozen=True)
class Failure:
    """A record or timer whose processing raised (the runtime dead-letters it)."""

    key: str
    cause: str  # "record" or "timer:<tag>"
    timestamp: int
    error: BaseException


class InMemoryRunner:
    """One computation, all keys, in memory; failures are kept (``take_failures``)."""

    def __init__(
        self,
        computation: Computation[Any] | type[Computation[Any]],
        registry: SchemaRegistry,
        *,
        wall_ms: int = 0,
        reads: Framing = SINGLE_OBJECT,
    ) -> None:
        """``reads``: how input values are framed (``serde/framing.py``; the batch engine
        reads archives, whose history may span both framings)."""
        comp = computation() if isinstance(computation, type) else computation
        comp.validate()
        self.comp = comp
        self.registry = registry
        self.codec = state_codec_of(comp)
        self.codec.bind(registry)
        self.inputs = {i.stream: (i, AvroSerde(registry, i.schema or "", framing=reads)) for i in comp.inputs}
        self.outputs = {o.stream: AvroSerde(registry, o.schema) for o in comp.outputs}
        # stream -> (decoded -> typed, typed -> encodable): the streams declared with a type
        self.types = stream_types(comp, registry)
        self.wall_ms = wall_ms
        self.watermark = MIN_WATERMARK
        self.failures: list[Failure] = []
        self.counters = Counters()
        self._stored: dict[bytes, bytes] = {}  # key -> encoded state, as committed
        self._produced: list[Production] = []  # encoded, as sent (topic: the stream)
        self._offsets = itertools.count()
        self._timers = TimerQueue()
        encoders: dict[str, tuple[str, Encoder]] = {s: (s, self._encoder(s)) for s in self.outputs}
        cache = StateCache(self.codec, self._load, max_keys=sys.maxsize)
        self._applier = Applier(comp, cache, self._timers, encoders, lambda: self.wall_ms, self.counters)

    def _encoder(self, stream: str) -> Encoder:
        encode = self.outputs[stream].encode
        return typed.encoding(encode, self.types[stream].write) if stream in self.types else encode

    def typed(self, stream: str, value: Any) -> Any:
        """A decoded value of ``stream`` (input or output) as its declared type (else as it is)."""
        conv = self.types.get(stream)
        return value if conv is None or type(value) is not dict else conv.read(value)

    def plain(self, stream: str, value: Any) -> Any:
        """A value of ``stream`` as Avro writes it (a typed one made a dict)."""
        conv = self.types.get(stream)
        return value if conv is None else conv.write(value)

    # -- input ---------------------------------------------------------------------------

    def input(self, stream: str) -> tuple[Input, AvroSerde]:
        """The declaration of input ``stream`` and its reader (``KeyError`` if none)."""
        try:
            return self.inputs[stream]
        except KeyError:
            raise KeyError(f"{stream!r} is not an input of {self.comp.name}") from None

    def process(
        self, stream: str, key: str, value: Any, timestamp: int, record_id: bytes, headers: Headers = ()
    ) -> None:
        """Run ``process_record`` on one decoded record (with its user ``headers``), and
        commit what it did. A record outside the kit's bounds (a key over
        ``MAX_KEY_BYTES``, a timestamp outside ``MIN_TIMESTAMP`` to ``MAX_TIMESTAMP``,
        headers over theirs) is a failure, as a worker dead-letters it."""
        bad = out_of_bounds(key, timestamp, headers)
        if bad is not None:
            self._fail(Failure(key, "record", timestamp, bad))
            return
        record = Record(key, value, timestamp, record_id, stream, 0, next(self._offsets), headers)
        batch = Checkpoint()
        try:
            error = self._applier.record(record, batch)
        finally:
            self._commit(batch)
        if error is not None:
            self._fail(Failure(key, "record", timestamp, error))

    def process_encoded(self, stream: str, data: bytes, timestamp: int, key: str, record_id: bytes) -> None:
        """``process`` a value as archived (Avro-encoded), keyed by the input's key
        extractor where it has one; one that does not decode is a failure, as the
        runtime dead-letters it."""
        inp, serde = self.input(stream)
        bad = out_of_bounds(key, timestamp)
        if bad is not None:  # before the key extractor, as a worker screens it
            self._fail(Failure(key, "record", timestamp, bad))
            return
        try:
            value = self.typed(stream, serde.decode(data))
        except SerializationError as exc:
            self._fail(Failure(key, "record", timestamp, exc))
            return
        self.process(stream, key if inp.key is None else inp.key(value), value, timestamp, record_id)

    # -- time ----------------------------------------------------------------------------

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

    def take_productions(self) -> list[Production]:
        """Every production since the last take, encoded as sent (``topic``: the stream)."""
        out, self._produced = self._produced, []
        return out

    def productions(self) -> list[Production]:
        """Every production not taken yet."""
        return list(self._produced)

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
