"""Computations used only by the tests (importable by worker processes as tests.support...)."""

from __future__ import annotations

from mwcore import Computation, Context, Input, JsonCodec, Output, Record, TimeDomain, Timer


class TimerProbe(Computation):
    """Sets the event-time timers each record lists; each firing is produced to ``fired``."""

    name = "timer_probe"
    inputs = (Input("timer_requests", schema="mw.tests.TimerRequest"),)
    outputs = (Output("fired", schema="mw.tests.TimerFired"),)
    state = JsonCodec[int]()

    def process_record(self, ctx: Context, record: Record) -> None:
        for at in record.value["at"]:
            ctx.timers.set(f"t{at}", at, TimeDomain.EVENT)

    def process_timer(self, ctx: Context, timer: Timer) -> None:
        fired = (ctx.state.get() or 0) + 1
        ctx.state.set(fired)
        value = {"key": ctx.key, "tag": timer.tag, "timestamp": timer.timestamp, "seq": fired}
        ctx.produce("fired", value, timer.timestamp)
