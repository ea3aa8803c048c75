"""A windowed count on event-time timers, with an early-watermark detector."""

from __future__ import annotations

from typing import Any

from mwcore import Computation, Context, Input, JsonCodec, Output, Record, TimeDomain, Timer
from mwcore.watermark import MIN_WATERMARK

WINDOW_MS = 1000


class WindowCount(Computation):
    """Counts records per key per 1-second window; a timer at each window's end emits it.

    A record whose timestamp is below the end of a window this key already emitted
    arrived after its computation's input watermark passed it: the watermark was early
    (I-8). It is emitted with ``early=True`` so the tests can see it.
    """

    name = "window_count"
    inputs = (Input("events", schema="mw.examples.Number"),)
    outputs = (Output("window_counts", schema="mw.tests.WindowCount"),)
    state = JsonCodec[dict[str, Any]]()
    partitions = 1

    def process_record(self, ctx: Context, record: Record) -> None:
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

    def process_timer(self, ctx: Context, timer: Timer) -> None:
        st = ctx.state.get() or {"w": {}, "fired": MIN_WATERMARK}
        start = timer.timestamp + 1 - WINDOW_MS
        count = st["w"].pop(str(start), 0)
        st["fired"] = max(st["fired"], timer.timestamp + 1)
        ctx.produce(
            "window_counts", {"key": ctx.key, "start": start, "count": count, "early": False}, timer.timestamp
        )
        ctx.state.set(st)
