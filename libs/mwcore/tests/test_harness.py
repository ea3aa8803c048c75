"""The in-memory harness runs a computation as the runtime does (one ``Applier``): what
it keeps of state, what it does with a call that fails or a state it cannot encode."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mwcore import Computation, Context, Input, Output, Record
from mwcore.errors import SerializationError
from mwcore.serde.avro import SchemaRegistry
from mwcore.testing import Harness

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


@dataclass
class Tally:
    total: int = 0


class Sloppy(Computation[Tally]):
    """Adds n to its state object in place; sets it only when n is even; n = 7 makes a
    state the codec cannot encode."""

    name = "sloppy"
    inputs = (Input("numbers", schema="mw.examples.Number"),)
    outputs = (Output("sums", schema="mw.examples.Sum"),)

    def process_record(self, ctx: Context[Tally], record: Record) -> None:
        st: Tally = ctx.state.get() or Tally()
        st.total += record.value["n"]
        if record.value["n"] % 2 == 0:
            ctx.state.set(st)
        if record.value["n"] == 7:
            ctx.state.set(object())
        ctx.produce("sums", {"key": ctx.key, "total": st.total, "count": 0}, record.timestamp)


def harness(**kw: Any) -> Harness:
    return Harness(Sloppy, SchemaRegistry.from_directory(SCHEMAS), **kw)


def test_each_call_reads_the_state_as_committed_not_what_was_changed_in_place() -> None:
    h = harness()
    for n in (2, 1, 1, 4):  # the two 1s change the object in place without set()
        h.send("numbers", {"n": n}, 0, key="a")
    assert [v["total"] for v in h.values("sums")] == [2, 3, 3, 6]
    assert h.state("a") == Tally(6)


def test_a_state_the_codec_cannot_encode_is_a_failure_and_leaves_no_trace() -> None:
    h = harness(raise_errors=False)
    h.send("numbers", {"n": 2}, 0, key="a")
    h.send("numbers", {"n": 7}, 1, key="a")
    [failure] = h.failures
    assert failure.cause == "record" and isinstance(failure.error, SerializationError)
    assert "cannot be encoded by DataclassCodec" in str(failure.error)
    assert h.state("a") == Tally(2) and len(h.values("sums")) == 1  # the failed call: nothing
    with pytest.raises(SerializationError):
        harness().send("numbers", {"n": 7}, 1, key="a")


def test_wall_time_timers_fire_as_the_wall_clock_is_moved() -> None:
    from mwcore.examples.running_sum import FLUSH_MS, RunningSum

    h = Harness(RunningSum, SchemaRegistry.from_directory(SCHEMAS), wall_ms=1_000)
    h.send("numbers", {"n": 3}, 10, key="a")
    h.send("numbers", {"n": 4}, 20, key="a")  # the flush timer is already set: not again
    assert h.advance_wall(FLUSH_MS - 1) == 0 and h.values("totals") == []
    assert h.advance_wall(1) == 1
    assert h.values("totals") == [{"key": "a", "total": 7, "count": 2}]
    assert h.pending_timers() == 0
