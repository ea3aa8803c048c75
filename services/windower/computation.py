"""The windower (paper section 2): counts each query per one-second bucket.

State per query: its language and the counts of its open buckets. A low-watermark
timer at each bucket's last millisecond emits the bucket's count to `window_counts`
once the input watermark has passed it, so the count is final: every query of that
second has arrived (except those the injector let through late, which the runtime
routes to `windower.late`).
"""

from __future__ import annotations

from typing import Any

from mwcore import Computation, Context, Input, Output, Record, TimeDomain, Timer

BUCKET_MS = 1000


class Windower(Computation[dict[str, Any]]):
    name = "windower"
    inputs = (Input("queries", schema="zeitgeist.Query"),)
    outputs = (Output("window_counts", schema="zeitgeist.WindowCount"),)
    # state: {"lang": str, "b": {bucket start: count}}

    def process_record(self, ctx: Context[dict[str, Any]], record: Record) -> None:
        st = ctx.state.get() or {"lang": record.value["lang"], "b": {}}
        start = record.timestamp // BUCKET_MS * BUCKET_MS
        buckets = st["b"]
        tag = str(start)
        if tag not in buckets:
            ctx.timers.set(tag, start + BUCKET_MS - 1, TimeDomain.EVENT)
        buckets[tag] = buckets.get(tag, 0) + 1
        ctx.state.set(st)

    def process_timer(self, ctx: Context[dict[str, Any]], timer: Timer) -> None:
        st = ctx.state.get()
        if st is None:
            return
        start = timer.timestamp + 1 - BUCKET_MS
        count = st["b"].pop(str(start), 0)
        if count:
            value = {"query": ctx.key, "lang": st["lang"], "bucket_start": start, "count": count}
            ctx.produce("window_counts", value, timer.timestamp)
        if st["b"]:
            ctx.state.set(st)
        else:
            ctx.state.clear()
