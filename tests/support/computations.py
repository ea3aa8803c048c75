"""Computations used only by the tests (importable by worker processes as tests.support...)."""

from __future__ import annotations

import os
import random
import string
import time
from dataclasses import dataclass
from pathlib import Path

from mwcore import (
    Computation,
    Context,
    Input,
    Options,
    Output,
    Record,
    TimeDomain,
    Timer,
)
from mwcore.examples.running_sum import RunningSum, SumState
from tests.support.windows import Forward


class TimerProbe(Computation[int]):
    """Sets the event-time timers each record lists; each firing is produced to ``fired``."""

    name = "timer_probe"
    inputs = (Input("timer_requests", schema="mw.tests.TimerRequest"),)
    outputs = (Output("fired", schema="mw.tests.TimerFired"),)

    def process_record(self, ctx: Context[int], record: Record) -> None:
        for at in record.value["at"]:
            ctx.timers.set(f"t{at}", at, TimeDomain.EVENT)

    def process_timer(self, ctx: Context[int], timer: Timer) -> None:
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


class ResidueSum(Computation[ResidueState]):
    """Sums ``numbers`` by n mod 7: keyed by a value field, so the runtime re-keys it."""

    name = "residue_sum"
    inputs = (Input("numbers", schema="mw.examples.Number", key=residue_of),)
    outputs = (Output("residue_sums", schema="mw.examples.Sum"),)

    def process_record(self, ctx: Context[ResidueState], record: Record) -> None:
        st: ResidueState = ctx.state.get() or ResidueState()
        st.total += record.value["n"]
        st.count += 1
        ctx.state.set(st)
        ctx.produce("residue_sums", {"key": ctx.key, "total": st.total, "count": st.count}, record.timestamp)


class WeakRunningSum(RunningSum):
    """The running sum with weak productions: sent before the checkpoint."""

    options = Options(productions="weak")


class LatestSum(RunningSum):
    """The running sum started at the end of its input (``start_from="latest"``)."""

    options = Options(start_from="latest")


STALL_N = 424_242  # a record with this n blocks the loop until the release file exists


class StallingSum(RunningSum):
    """The running sum whose user code hangs on one record (a stalled loop) until the
    file named by ``MW_TEST_RELEASE`` exists (bounded, so a failed test cannot leave
    the worker hanging)."""

    def process_record(self, ctx: Context, record: Record) -> None:
        if record.value["n"] == STALL_N:
            release = Path(os.environ["MW_TEST_RELEASE"])
            deadline = time.monotonic() + 300
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            return
        super().process_record(ctx, record)


def filler(length: int) -> str:
    """``length`` characters of text LZ4 cannot shrink (pseudo-random, seeded by length)."""
    return "".join(random.Random(length).choices(string.ascii_letters + string.digits + "+/", k=length))


class SizedSum(RunningSum):
    """The running sum, except that a record with n >= 1000 produces one ``sums`` value
    whose key field is ``n`` characters long (state unchanged): values at and over the
    production size limit."""

    def process_record(self, ctx: Context, record: Record) -> None:
        n = record.value["n"]
        if n < 1000:
            super().process_record(ctx, record)
            return
        ctx.produce("sums", {"key": filler(n), "total": 0, "count": 0}, record.timestamp)


class DropLateForward(Forward):
    """``Forward`` with ``late="drop"``: late records are counted and dropped."""

    name = "forward_drop"
    options = Options(late="drop")


class ReadingEcho(Computation):
    """Produces each ``readings`` record as it decoded it (resolved into its reader
    schema, ``mw.tests.Reading`` of whichever version its schemas directory holds) to
    ``echoes``: the schema-upgrade tests read back what a reader made of each record."""

    name = "reading_echo"
    inputs = (Input("readings", schema="mw.tests.Reading"),)
    outputs = (Output("echoes", schema="mw.tests.Reading"),)

    def process_record(self, ctx: Context, record: Record) -> None:
        ctx.produce("echoes", record.value, record.timestamp)


class Postdate(Computation):
    """Produces each query ``user`` ms after its own time: a computation whose output
    timestamps a record can push past what the broker takes (the hostile tests' refused
    production)."""

    name = "postdate"
    inputs = (Input("queries", schema="zeitgeist.Query"),)
    outputs = (Output("postdated", schema="zeitgeist.Query"),)
    partitions = 1

    def process_record(self, ctx: Context, record: Record) -> None:
        ctx.produce("postdated", record.value, record.timestamp + int(record.value["user"]))


class EventSum(RunningSum):
    """The running sum flushed on event time, not wall time: every production, timer
    and checkpoint follows from the input and the watermark alone (the differential
    test of the two cores compares them byte for byte). A flush timer at the end of
    each second of event time in which the key had a record produces ``totals``."""

    name = "event_sum"

    def schedule_flush(self, ctx: Context, record: Record, st: SumState) -> None:
        end = record.timestamp // 1000 * 1000 + 999
        ctx.timers.set(f"s{end}", end, TimeDomain.EVENT)


class TransactionalSum(RunningSum):
    """The running sum with transactional productions: each checkpoint's productions and
    its commit witness in one Kafka transaction."""

    options = Options(productions="transactional")


class HeadedSum(RunningSum):
    """The running sum whose productions carry headers: the input's user headers
    forwarded, and the record's amount (``n``), so that a reader can tell each one's."""

    def process_record(self, ctx: Context, record: Record) -> None:
        st: SumState = ctx.state.get() or SumState()
        st.total += record.value["n"]
        st.count += 1
        forwarded = [(name, value) for name, value in record.headers if value is not None]
        total = {"key": ctx.key, "total": st.total, "count": st.count}
        ctx.produce("sums", total, record.timestamp, headers=[*forwarded, ("n", str(record.value["n"]))])
        self.schedule_flush(ctx, record, st)
        ctx.state.set(st)
