"""The native core's applier: the reference ``Applier`` (``runtime/effects.py``) with its
common path in Rust (``runtime/effects.rs``).

``records`` and ``fire`` call user code with the native ``Context`` and apply its effects
to the open batch in Rust, on the native timer queue; ``encode_dirty`` encodes each dirty
key's state there. When careful (after a redo), every call goes through the reference,
and a failed call is undone by the reference's ``_undo`` either way. The Rust side is
given each part it uses explicitly, and hands its counts back for the Python side to add.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mwcore.api.codecs import JsonCodec
from mwcore.api.computation import Computation
from mwcore.api.context import Encoder
from mwcore.api.record import Production, Record, TimeDomain, Timer
from mwcore.controls import NegativeControls
from mwcore.cores.native import DOMAINS, rust
from mwcore.runtime.counters import Counters
from mwcore.runtime.effects import Applier, Latency, RedoCareful, TimerFailed
from mwcore.runtime.state_cache import StateCache
from mwcore.runtime.timers import Timers
from mwcore.store.checkpoint import Checkpoint


class NativeApplier(Applier):
    def __init__(
        self,
        computation: Computation[Any],
        cache: StateCache,
        timers: Timers,  # the native core's queue
        encoders: dict[str, tuple[str, Encoder]],
        clock: Callable[[], int],
        counters: Counters,
        controls: NegativeControls,
        careful: bool,
    ) -> None:
        if not isinstance(timers, rust.TimerQueue):
            raise TypeError(f"the native applier fires from the native timer queue, not {type(timers)}")
        super().__init__(computation, cache, timers, encoders, clock, counters, controls, careful)
        # JsonCodec's first try, called by the native core without encode's frame
        self._first_try = cache.codec.first_try() if type(cache.codec) is JsonCodec else None
        self._fast = rust.Applier(
            computation.process_record,
            computation.process_timer,
            cache.values,
            cache.get,
            self.dirty,
            timers,
            self._undo,
            self._delete_fired,
            encoders,
            clock,
            (Record, Timer, Production, DOMAINS),
        )

    def records(
        self,
        items: list[Any],
        batch: Checkpoint,
        latency: Latency | None,
        fault_at: int,
        fault: Callable[[], None],
        bad: Callable[[int, BaseException], None],
        failed: Callable[[Record, Exception], None],
    ) -> int:
        if self.careful:
            return super().records(items, batch, latency, fault_at, fault, bad, failed)
        out = batch.productions if self.weak is None else self.weak
        try:
            return self._fast.records(
                items, batch.state, batch.timers, out, batch.seen, latency, fault_at, fault, bad, failed
            )
        finally:
            self.counters.late_productions += self._fast.take_late()

    def fire(
        self,
        domain: TimeDomain,
        limit_ts: int,
        batch: Checkpoint,
        failed: TimerFailed,
        max_firings: int | None = None,
        before: Callable[[], None] | None = None,
    ) -> int:
        if self.careful:
            return super().fire(domain, limit_ts, batch, failed, max_firings, before)
        out = batch.productions if self.weak is None else self.weak
        try:
            fired = self._fast.fire(
                domain, limit_ts, batch.state, batch.timers, out, failed, max_firings, before
            )
        finally:
            self.counters.late_productions += self._fast.take_late()
        self.counters.timers_fired += fired  # (as the reference: none when a firing raised out)
        return fired

    def encode_dirty(self, batch: Checkpoint) -> None:
        if not self.dirty:
            return
        failed = self._fast.encode_dirty(batch.state, self._encode, self._first_try)
        if failed is not None:
            key, exc = failed
            raise RedoCareful(key, exc) from exc
