"""A keyed running sum: per-key state, one production per record, a wall-time flush timer.

``numbers`` (key, n) -> ``sums`` (key, total, count after this record) and, every
``FLUSH_MS`` of wall time per active key, ``totals`` (key, total, count).
"""

from __future__ import annotations

from dataclasses import dataclass

from mwcore import Computation, Context, Input, Output, Record, TimeDomain, Timer

FLUSH_MS = 200


@dataclass
class SumState:
    total: int = 0
    count: int = 0
    flush_pending: bool = False


class RunningSum(Computation[SumState]):
    name = "running_sum"
    inputs = (Input("numbers", schema="mw.examples.Number"),)
    outputs = (
        Output("sums", schema="mw.examples.Sum"),
        Output("totals", schema="mw.examples.Sum"),
    )

    def process_record(self, ctx: Context[SumState], record: Record) -> None:
        if record.value["n"] < 0:
            raise ValueError(f"negative amount {record.value['n']}")  # goes to the dead letters
        st = ctx.state.get(SumState())
        st.total += record.value["n"]
        st.count += 1
        ctx.produce("sums", {"key": ctx.key, "total": st.total, "count": st.count}, record.timestamp)
        self.schedule_flush(ctx, record, st)
        ctx.state.set(st)

    def schedule_flush(self, ctx: Context[SumState], record: Record, st: SumState) -> None:
        """The flush timer: ``FLUSH_MS`` of wall time after the key's first unflushed record."""
        if not st.flush_pending:
            st.flush_pending = True
            ctx.timers.set("flush", ctx.now_ms() + FLUSH_MS, TimeDomain.WALL)

    def process_timer(self, ctx: Context[SumState], timer: Timer) -> None:
        st = ctx.state.get(SumState())
        st.flush_pending = False
        ctx.produce("totals", {"key": ctx.key, "total": st.total, "count": st.count}, timer.timestamp)
        ctx.state.set(st)
