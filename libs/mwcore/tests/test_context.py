from __future__ import annotations

import pytest

from mwcore.api import ids
from mwcore.api.context import Context
from mwcore.api.record import TimeDomain


def make() -> Context:
    return Context({"out": ("ns.out", lambda v: repr(v).encode())}, lambda key: {"n": 1}, lambda: 42)


def test_effects_are_recorded_not_performed() -> None:
    ctx = make()
    ctx.begin("k", b"c" * 16, 100)
    assert ctx.state.get() == {"n": 1}
    ctx.state.set({"n": 2})
    assert ctx.state.get() == {"n": 2}
    ctx.timers.set("t", 500)
    ctx.timers.set("w", ctx.now_ms() + 10, TimeDomain.WALL)
    ctx.produce("out", {"x": 1}, 100)
    ctx.produce("out", {"x": 2}, 99)  # older than its cause: counted
    eff = ctx.effects()
    assert eff.state == {"n": 2}
    assert [(op.tag, op.timestamp) for op in eff.timer_ops] == [("t", 500), ("w", 52)]
    assert [p.id for p in eff.productions] == [ids.derive(b"c" * 16, 0), ids.derive(b"c" * 16, 1)]
    assert eff.productions[0].topic == "ns.out" and eff.productions[0].key == b"k"
    assert eff.late_productions == 1


def test_clear_and_unknown_output() -> None:
    ctx = make()
    ctx.begin("k", b"c" * 16, 0)
    ctx.state.clear()
    assert ctx.state.get("default") == "default"
    with pytest.raises(KeyError, match="not a declared output"):
        ctx.produce("nope", 1, 0)
    with pytest.raises(ValueError):
        ctx.state.set(None)


def test_begin_resets_effects() -> None:
    ctx = make()
    ctx.begin("a", b"a" * 16, 0)
    ctx.state.set(1)
    ctx.begin("b", b"b" * 16, 0)
    assert not ctx.effects().state_changed
