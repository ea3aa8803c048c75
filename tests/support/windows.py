"""A windowed count on event-time timers, with an early-watermark detector."""

from __future__ import annotations

from typing import Any

from mwcore import Computation, Context, Input, Output, Record, TimeDomain, Timer
from mwcore.api.clock import MIN_WATERMARK

WINDOW_MS = 1000


class WindowCount(Computation[dict[str, Any]]):
    """Counts records per key per 1-second window; a timer at each window's end emits it.

    A record whose timestamp is below the end of a window this key already emitted
    arrived after its computation's input watermark passed it: the watermark was early
    (I-8). It is emitted with ``early=True`` so the tests can see it.
    """

    name = "window_count"
    inputs = (Input("events", schema="mw.examples.Number"),)
    outputs = (Output("window_counts", schema="mw.tests.WindowCount"),)
    partitions = 1

    def process_record(self, ctx: Context[dict[str, Any]], record: Record) -> None:
        st = ctx.state.get() or {"w": {}, "fired": MIN_WATERMARK}
        start = record.timestamp // WINDOW_MS * WINDOW_MS
        if record.timestamp < st["fired"]:
            ctx.produce(
                "window_counts", {"key": ctx.key, "start": start, "count": 1, "early": True}, record.timestamp
            )
        windows = st["w"]
        if str(start) not in windows:
            # at the window's last millisecond: fires once the watermark is past it
            ctx.timers.set(f"w{start}", start + WINDOW_MS - 1, TimeDomain.EVENT)
        windows[str(start)] = windows.get(str(start), 0) + 1
        ctx.state.set(st)

    def process_timer(self, ctx: Context[dict[str, Any]], timer: Timer) -> None:
        st = ctx.state.get() or {"w": {}, "fired": MIN_WATERMARK}
        start = timer.timestamp + 1 - WINDOW_MS
        count = st["w"].pop(str(start), 0)
        st["fired"] = max(st["fired"], timer.timestamp + 1)
        ctx.produce(
            "window_counts", {"key": ctx.key, "start": start, "count": count, "early": False}, timer.timestamp
        )
        ctx.state.set(st)


class Forward(Computation):
    """Stage 1 of the three-stage test pipeline: passes records on, keeps timestamps.
    Late records (from the injector, behind its watermark) are routed to its late topic."""

    name = "forward"
    inputs = (Input("events", schema="mw.examples.Number"),)
    outputs = (Output("forwarded", schema="mw.examples.Number"),)
    partitions = 2

    def process_record(self, ctx: Context, record: Record) -> None:
        ctx.produce("forwarded", record.value, record.timestamp)


class StageCount(WindowCount):
    """Stage 2: 1-second window counts of the forwarded records."""

    name = "stage_count"
    inputs = (Input("forwarded", schema="mw.examples.Number"),)
    partitions = 2


ROLLUP_MS = 5000


class Rollup(Computation[dict[str, Any]]):
    """Stage 3: per key, sums stage 2's window counts into 5-second windows, on
    event-time timers; detects early watermarks like ``WindowCount``."""

    name = "rollup"
    inputs = (Input("window_counts", schema="mw.tests.WindowCount"),)
    outputs = (Output("rollups", schema="mw.tests.WindowCount"),)
    partitions = 2

    def process_record(self, ctx: Context[dict[str, Any]], record: Record) -> None:
        st = ctx.state.get() or {"w": {}, "fired": MIN_WATERMARK}
        value = record.value
        if value["early"]:
            return
        start = value["start"] // ROLLUP_MS * ROLLUP_MS
        if record.timestamp < st["fired"]:
            ctx.produce(
                "rollups", {"key": ctx.key, "start": start, "count": 0, "early": True}, record.timestamp
            )
        windows = st["w"]
        if str(start) not in windows:
            ctx.timers.set(f"r{start}", start + ROLLUP_MS - 1, TimeDomain.EVENT)
        windows[str(start)] = windows.get(str(start), 0) + value["count"]
        ctx.state.set(st)

    def process_timer(self, ctx: Context[dict[str, Any]], timer: Timer) -> None:
        st = ctx.state.get() or {"w": {}, "fired": MIN_WATERMARK}
        start = timer.timestamp + 1 - ROLLUP_MS
        total = st["w"].pop(str(start), 0)
        st["fired"] = max(st["fired"], timer.timestamp + 1)
        ctx.produce(
            "rollups", {"key": ctx.key, "start": start, "count": total, "early": False}, timer.timestamp
        )
        ctx.state.set(st)


class Tally(Computation[int]):
    """Counts records per key (state only): the seen-id memory test's computation."""

    name = "tally"
    inputs = (Input("events", schema="mw.examples.Number"),)
    partitions = 2

    def process_record(self, ctx: Context[int], record: Record) -> None:
        ctx.state.set((ctx.state.get() or 0) + 1)
