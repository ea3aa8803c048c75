"""The windowed workload's computation: a one-second tumbling count per key, each window
emitted by an event-time timer at its end once the input watermark has passed it
(exactly-once, strong productions)."""

from __future__ import annotations

from bench.keyed_count import PRODUCTIONS
from mwcore import Computation, Context, Input, Options, Output, Record, TimeDomain, Timer

WINDOW_MS = 1000


class WindowedCount(Computation[dict[str, int]]):
    options = Options(productions=PRODUCTIONS)
    name = "windowed_count"
    inputs = (Input("events", schema="mw.bench.Event"),)
    outputs = (Output("windows", schema="mw.bench.ChaosWindow"),)
    # state: window start -> records so far

    def process_record(self, ctx: Context[dict[str, int]], record: Record) -> None:
        st = ctx.state.get() or {}
        start = record.timestamp // WINDOW_MS * WINDOW_MS
        tag = str(start)
        if tag not in st:
            ctx.timers.set(tag, start + WINDOW_MS - 1, TimeDomain.EVENT)
        st[tag] = st.get(tag, 0) + 1
        ctx.state.set(st)

    def process_timer(self, ctx: Context[dict[str, int]], timer: Timer) -> None:
        st = ctx.state.get() or {}
        count = st.pop(timer.tag, 0)
        ctx.produce("windows", {"key": ctx.key, "start": int(timer.tag), "count": count}, timer.timestamp)
        ctx.state.set(st)
