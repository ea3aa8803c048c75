"""Running user code and applying what it asked for: the one place where a call's
state, timers and productions become soft state and writes of the open batch.

The worker's intervals (``interval.py``) and the in-memory harness (``harness.py``) both
run computations through an ``Applier``, so what a computation does in a unit test is
what it does in the pipeline. For each call:

1. the context is pointed at the key and its cause (``Context.begin``);
2. user code runs; if it raises, the key's cached state is restored and the error is
   returned (the caller dead-letters the record or timer): the call leaves no trace;
3. its effects are applied: the new state is cached and the key marked dirty; timer
   sets and clears go to the timer queue and the batch; productions to the batch (or,
   for weak productions, to ``weak``, sent before the checkpoint).

State is encoded once per dirty key per batch (``encode_dirty``, when the batch is
made a checkpoint), not once per call: a hot key's state is encoded once however many
records of the batch change it. The price is that a failed call cannot always be
undone on the spot: user code may have changed the cached object in place, and the
last good value of a key dirty in the batch exists only as that object. Then the call
raises ``RedoCareful``: the owner drops the open batch and redoes it from the last
checkpoint *carefully* (``careful``): each call's state is encoded at once, so a
value the codec cannot encode fails its call rather than the commit, and a failed
call is undone from the last good bytes. Failures are rare; the common path pays
nothing for them.

A timer's firing also deletes the timer's copy in the batch (a re-set in the callback,
applied after, wins).

This is the reference. The native core's applier (``mwcore.cores.native.effects``) runs
the common path in Rust: ``records`` and ``fire`` call user code with the native
``Context`` and apply its effects there, on the native timer queue; the careful redo,
and undoing a failed call, stay here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mwcore.api import ids
from mwcore.api.computation import Computation
from mwcore.api.context import UNSET, Context, Effects, Encoder
from mwcore.api.record import Production, Record, TimeDomain, Timer
from mwcore.controls import SAFE, NegativeControls
from mwcore.errors import SerializationError
from mwcore.runtime.counters import Counters
from mwcore.runtime.state_cache import StateCache
from mwcore.runtime.timers import Timers
from mwcore.store.checkpoint import Checkpoint, TimerEntry
from mwcore.store.checkpoint_wire import encode_entry, field_of

TimerFailed = Callable[[TimerEntry, bytes, Exception], None]  # (entry, firing id, error)
# (timestamps, arrivals, arrival ms): where each record's timestamp and arrival go
Latency = tuple[list[int], list[int], int]


class RedoCareful(Exception):
    """The open batch cannot be committed as it is: a call failed on a key whose last
    good state in the batch was never encoded, or a key's state cannot be encoded.
    Its owner redoes the batch from the last checkpoint with ``careful`` on."""

    def __init__(self, key: str, cause: Exception) -> None:
        super().__init__(f"key {key!r}: {type(cause).__name__}: {cause}")
        self.key = key
        self.cause = cause


class Applier:
    def __init__(
        self,
        computation: Computation[Any],
        cache: StateCache,
        timers: Timers,
        encoders: dict[str, tuple[str, Encoder]],  # stream -> (topic, encode)
        clock: Callable[[], int],
        counters: Counters,
        controls: NegativeControls = SAFE,  # keep_fired_timers: a firing leaves its timer stored
        careful: bool = True,  # encode each call's state at once (else once per dirty key per batch)
    ) -> None:
        self.comp = computation
        self.cache = cache
        self.timers = timers
        self.counters = counters
        self.ctx: Context[Any] = Context(encoders, cache.get, clock)
        self.weak: list[Production] | None = [] if computation.options.productions == "weak" else None
        self._values = cache.values
        self._encode = cache.codec.encode
        self._delete_fired = not controls.keep_fired_timers
        self.careful = careful
        self.dirty: dict[str, None] = {}  # keys whose cached state the batch has yet to encode (in order)

    def records(
        self,
        items: list[Any],  # each a Record, or (index, error) for ``bad``
        batch: Checkpoint,
        latency: Latency | None,
        fault_at: int,
        fault: Callable[[], None],
        bad: Callable[[int, BaseException], None],
        failed: Callable[[Record, Exception], None],
    ) -> int:
        """Run a chunk of records, in order: each one user code ran on is seen in the
        batch; ``failed`` gets each one it failed on, ``bad`` each item that is no
        record; ``fault`` is called before item ``fault_at``. How many records ran."""
        seen = batch.seen
        processed = 0
        for n, item in enumerate(items):
            if n == fault_at:
                fault()
            if not isinstance(item, Record):
                bad(*item)
                continue
            processed += 1
            if latency is not None:
                latency[0].append(item.timestamp)
                latency[1].append(latency[2])
            error = self.record(item, batch)
            if error is not None:  # user code failed, or its state cannot be encoded
                failed(item, error)
                continue
            seen[item.id] = item.timestamp
        return processed

    def record(self, record: Record, batch: Checkpoint) -> Exception | None:
        """Run ``process_record``; the error that made it leave no trace, or None."""
        key = record.key
        ctx = self.ctx
        ctx.begin(key, record.id, record.timestamp)
        try:
            self.comp.process_record(ctx, record)
        except Exception as exc:  # user code failed: dead-lettered by the caller
            self._undo(key, exc, batch.state)
            return exc
        return self.apply(key, ctx.effects(), batch)

    def timer(self, entry: TimerEntry, batch: Checkpoint) -> Exception | None:
        """Run ``process_timer`` for a due timer (already out of the queue)."""
        key = entry.key
        fid = firing_id(entry)
        self.cache.get(key)
        ctx = self.ctx
        ctx.begin(key, fid, entry.timestamp)
        if self._delete_fired:
            batch.timers[field_of(key, entry.tag)] = None
        try:
            self.comp.process_timer(ctx, Timer(key, entry.tag, entry.timestamp, entry.domain))
        except Exception as exc:
            self._undo(key, exc, batch.state)
            return exc
        return self.apply(key, ctx.effects(), batch)

    def _undo(self, key: str, exc: Exception, state: dict[bytes, bytes | None]) -> None:
        """Put the key's cached state back as it was before the failed call (``state``:
        the open batch's)."""
        if key in self.dirty:  # its last good value was never encoded
            raise RedoCareful(key, exc)
        self.cache.restore(key, state)

    def fire(
        self,
        domain: TimeDomain,
        limit_ts: int,
        batch: Checkpoint,
        failed: TimerFailed,
        max_firings: int | None = None,
        before: Callable[[], None] | None = None,
    ) -> int:
        """Fire the timers of ``domain`` below ``limit_ts``, oldest first (those the
        callbacks set below it too), at most ``max_firings``; ``failed`` gets each one
        that raised. Returns how many fired."""
        fired = 0
        while (entry := self.timers.pop_due(domain, limit_ts)) is not None:
            fired += 1
            if before is not None:
                before()
            error = self.timer(entry, batch)
            if error is not None:
                failed(entry, firing_id(entry), error)
            if max_firings is not None and fired >= max_firings:
                break
        self.counters.timers_fired += fired
        return fired

    def apply(self, key: str, eff: Effects, batch: Checkpoint) -> SerializationError | None:
        """Merge one successful call's effects; if its state cannot be encoded, nothing
        is applied and the error is returned."""
        value = eff.state
        if value is not UNSET and not self.careful:
            self._values[key] = value
            if value is None:
                self.dirty.pop(key, None)
                batch.state[key.encode()] = None
            else:
                self.dirty[key] = None
        elif value is not UNSET:
            try:
                encoded = None if value is None else self._encode(value)
                if encoded is not None and encoded.__class__ is not bytes:
                    encoded = bytes(encoded)  # a codec's bytearray or memoryview: the store takes bytes
            except Exception as exc:
                self.cache.restore(key, batch.state)
                codec = type(self.cache.codec).__name__
                return SerializationError(f"state of key {key!r} cannot be encoded by {codec}: {exc}")
            self._values[key] = value
            batch.state[key.encode()] = encoded
        for op in eff.timer_ops:
            fld = field_of(key, op.tag)
            if op.timestamp is None:
                self.timers.clear(key, op.tag)
                batch.timers[fld] = None
            else:
                entry = TimerEntry(key, op.tag, op.timestamp, op.domain, op.set_id)
                self.timers.set(entry)
                batch.timers[fld] = encode_entry(entry)
        if eff.productions:
            if self.weak is not None:
                self.weak += eff.productions
            else:
                batch.productions += eff.productions
        if eff.late_productions:
            self.counters.late_productions += eff.late_productions
        return None

    def encode_dirty(self, batch: Checkpoint) -> None:
        """Write the state of each key the batch changed, encoded once; ``RedoCareful``
        if one cannot be encoded (the careful redo finds the call that made it)."""
        if not self.dirty:
            return
        encode, values, state = self._encode, self._values, batch.state
        for key in self.dirty:
            try:
                encoded = encode(values[key])
                if encoded.__class__ is not bytes:
                    encoded = bytes(encoded)
            except Exception as exc:
                raise RedoCareful(key, exc) from exc
            state[key.encode()] = encoded
        self.dirty.clear()

    def take_weak(self) -> list[Production]:
        """The weak productions made since the last take."""
        out = self.weak or []
        if out:
            self.weak = []
        return out


def firing_id(entry: TimerEntry) -> bytes:
    """The identity of a timer's firing: its productions' ids derive from it."""
    return ids.timer_firing_id(entry.set_id, entry.tag, entry.timestamp)
