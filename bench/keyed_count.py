"""The benchmark's computation: a keyed count, exactly-once, strong productions.

Every record updates its key's count (per-key state in Redis) and produces the new
count to ``counts`` (a strong production: checkpointed, then sent, then deleted).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal, cast

from mwcore import Computation, Context, Input, Options, Output, Record, TimeDomain, Timer

# A benchmark's variant may ask for other productions: ``BENCH_PRODUCTIONS=transactional``
PRODUCTIONS = cast(Literal["strong", "weak", "transactional"], os.environ.get("BENCH_PRODUCTIONS", "strong"))
# ``BENCH_TYPED=1``: the same count on typed records (``serde/typed.py``), to measure them apart
TYPED = os.environ.get("BENCH_TYPED") == "1"


@dataclass
class Event:
    query: str
    lang: str
    latency_us: int


@dataclass
class Count:
    count: int


def _typed(tp: type) -> dict[str, Any]:
    return {"type": tp} if TYPED else {}


def _count(count: int) -> Any:
    return Count(count) if TYPED else {"count": count}


class KeyedCount(Computation[int]):
    options = Options(productions=PRODUCTIONS)
    name = "keyed_count"
    # (no type= where untyped: older code, measured against, has no such field)
    inputs = (Input("events", schema="mw.bench.Event", **_typed(Event)),)
    outputs = (Output("counts", schema="mw.bench.Count", **_typed(Count)),)

    def process_record(self, ctx: Context[int], record: Record) -> None:
        count = (ctx.state.get() or 0) + 1
        ctx.state.set(count)
        ctx.produce("counts", _count(count), record.timestamp)


class KeyedCountEvery(Computation[list[int]]):
    """The same count, emitted per key at most once a second (a wall-time timer), as a
    windowed aggregation would: exactly-once and strong productions still on."""

    name = "keyed_count_every"
    inputs = (Input("events", schema="mw.bench.Event"),)
    outputs = (Output("counts", schema="mw.bench.Count"),)
    # state: [count, timer pending (0/1)]

    def process_record(self, ctx: Context[list[int]], record: Record) -> None:
        count, pending = ctx.state.get() or [0, 0]
        if not pending:
            ctx.timers.set("emit", ctx.now_ms() + 1000, TimeDomain.WALL)
        ctx.state.set([count + 1, 1])

    def process_timer(self, ctx: Context[list[int]], timer: Timer) -> None:
        count, _ = ctx.state.get() or [0, 0]
        ctx.produce("counts", {"count": count}, timer.timestamp)
        ctx.state.set([count, 0])


class KeyedCountWide(KeyedCount):
    """The same keyed count over 16 key intervals (``bench/scale.py``: enough intervals
    for many worker processes)."""

    name = "keyed_count_wide"
    partitions = 16
