"""Computations used only by the tests (importable by worker processes as tests.support...)."""

from __future__ import annotations

from dataclasses import dataclass

from mwcore import (
    Computation,
    Context,
    DataclassCodec,
    Input,
    JsonCodec,
    Options,
    Output,
    Record,
    TimeDomain,
    Timer,
)
from mwcore.examples.running_sum import RunningSum


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


@dataclass
class ResidueState:
    total: int = 0
    count: int = 0


def residue_of(value: dict[str, int]) -> str:
    return str(value["n"] % 7)


class ResidueSum(Computation):
    """Sums ``numbers`` by n mod 7: keyed by a value field, so the runtime re-keys it."""

    name = "residue_sum"
    inputs = (Input("numbers", schema="mw.examples.Number", key=residue_of),)
    outputs = (Output("residue_sums", schema="mw.examples.Sum"),)
    state = DataclassCodec(ResidueState)

    def process_record(self, ctx: Context, record: Record) -> None:
        st: ResidueState = ctx.state.get() or ResidueState()
        st.total += record.value["n"]
        st.count += 1
        ctx.state.set(st)
        ctx.produce("residue_sums", {"key": ctx.key, "total": st.total, "count": st.count}, record.timestamp)


class WeakRunningSum(RunningSum):
    """The running sum with weak productions: sent before the checkpoint."""

    options = Options(productions="weak")
