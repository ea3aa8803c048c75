"""The benchmark's computation: a keyed count, exactly-once, strong productions.

Every record updates its key's count (per-key state in Redis) and produces the new
count to ``counts`` (a strong production: checkpointed, then sent, then deleted).
"""

from __future__ import annotations

from mwcore import Computation, Context, Input, JsonCodec, Output, Record


class KeyedCount(Computation):
    name = "keyed_count"
    inputs = (Input("events", schema="mw.bench.Event"),)
    outputs = (Output("counts", schema="mw.bench.Count"),)
    state = JsonCodec[int]()

    def process_record(self, ctx: Context, record: Record) -> None:
        count = (ctx.state.get() or 0) + 1
        ctx.state.set(count)
        ctx.produce("counts", {"count": count}, record.timestamp)
