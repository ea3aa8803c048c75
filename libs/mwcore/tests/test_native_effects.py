"""The native core's effects (its applier, ``Context`` and timer queue, through the seam:
``core("native")``) held to the reference (``core("python")``: ``runtime.effects.Applier``
on the Python ``Context`` and ``TimerQueue``): the same drawn chunks of records and timer
firings, run through both, leave the same batch (state, timers, productions, seen ids),
the same cache, dirty keys, timer queue, counters and dead letters, and raise the same
``RedoCareful``; with fired timers deleted (the default) and kept
(``MW_UNSAFE_KEEP_FIRED_TIMERS``, the negative control's path).

The computation draws what each call does from a generator seeded by the call's cause
(record id, or timer tag and time), so both runs make the same calls: state read, set
(in place or anew) or cleared, timers set in each domain and cleared, productions to
two outputs (some with a timestamp older than the cause, some to another key, one to an
undeclared output), user code raising before or after its effects.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from typing import Any

import pytest

from mwcore import Computation, Context, JsonCodec, Options, Record, TimeDomain, Timer
from mwcore.api.computation import state_codec_of
from mwcore.api.record import Production
from mwcore.controls import SAFE, NegativeControls
from mwcore.cores import CoreName, core
from mwcore.runtime.counters import Counters
from mwcore.runtime.effects import RedoCareful
from mwcore.runtime.state_cache import StateCache
from mwcore.runtime.timers import Timers
from mwcore.store.checkpoint import Checkpoint, TimerEntry
from testbed.native import requires_native

pytestmark = requires_native

DOMAINS = (TimeDomain.EVENT, TimeDomain.WALL, TimeDomain.HOLD)
KEYS = [f"k{i}" for i in range(12)] + ["ключ", ""]
# A production's user headers: none mostly; some good (a mapping, pairs with a name twice,
# str values); some refused (a reserved name in any case, a value of another type, one
# header too many).
GOOD_HEADERS: list[Any] = [{"trace": "t-1"}, [("b", b"\x00"), ("b", b"")], (("ünï", "é"),)]
HEADER_DRAWS: list[Any] = [
    None, None, None, None, *GOOD_HEADERS,
    {"mw-id": b"x" * 16}, [("MW-Late-Ms", b"1")], [("n", 5)], [(f"h{i}", b"") for i in range(65)],
]  # fmt: skip
STREAMS = {"out": ("out-topic", lambda v: repr(v).encode()), "side": ("side-topic", lambda v: bytes(v))}


class Boom(Exception):
    pass


def _rng(*cause: object) -> random.Random:
    return random.Random(repr(cause))


class Drawn(Computation[Any]):
    """Each call does what a generator seeded by its cause draws; ``seen`` tallies the
    branches taken (for the coverage test)."""

    name = "drawn"

    def __init__(self, seen: Counter[str]) -> None:
        self.seen = seen

    def _act(self, ctx: Context[Any], rng: random.Random, cause_ts: int) -> None:
        tally = self.seen
        if rng.random() < 0.05:
            tally["raise_before"] += 1
            raise Boom("before any effect")
        st = ctx.state.get()
        if st is None:
            st = ctx.state.get({"fresh": True})
            tally["absent"] += 1
        roll = rng.random()
        if roll < 0.45:
            st["n"] = st.get("n", 0) + 1  # in place
            ctx.state.set(st)
            tally["set_in_place"] += 1
        elif roll < 0.65:
            ctx.state.set({"n": rng.randrange(100), "at": cause_ts})
            tally["set_anew"] += 1
        elif roll < 0.75:
            ctx.state.clear()
            tally["clear"] += 1
            if rng.random() < 0.3:
                tally["get_after_clear"] += ctx.state.get("dflt") == "dflt"
        elif (odd := int(roll * 1e6) % 20) < 3:  # (no draw: the scenarios' timers stay as they were)
            # what orjson cannot write as the standard library does, or no JSON at all
            ctx.state.set({"odd": (float("inf"), 2**70, {1, 2})[odd]})
            tally[("state_inf", "state_big", "state_set")[odd]] += 1
        for _ in range(rng.choice((0, 0, 1, 2))):
            tag = rng.choice(("a", "b", "c", "é"))
            if rng.random() < 0.2:
                ctx.timers.clear(tag)
                tally["timer_clear"] += 1
            else:
                domain = rng.choice(DOMAINS)
                ts = cause_ts + rng.randrange(-5, 60)
                if rng.random() < 0.5:
                    ctx.timers.set(tag, ts, domain)
                else:
                    ctx.timers.set(tag, float(ts) + 0.5)  # int() of it, in the event domain
                tally[f"timer_set_{domain.value}"] += 1
        for _ in range(rng.choice((0, 1, 1, 2))):
            late = rng.random() < 0.2
            ts = cause_ts - 3 if late else cause_ts + rng.randrange(0, 9)
            key = rng.choice((None, None, "other"))
            headers = rng.choice(HEADER_DRAWS)
            if headers is not None:
                tally["headers_good" if headers in GOOD_HEADERS else "headers_refused"] += 1
            if rng.random() < 0.5:
                ctx.produce("out", {"st": st, "key": ctx.key}, ts, key, headers)
            else:
                ctx.produce("side", rng.randbytes(rng.randrange(0, 20)), ts, key, headers=headers)
            tally["late_production" if late else "production"] += 1
        if rng.random() < 0.02:
            tally["undeclared"] += 1
            ctx.produce("nowhere", {}, cause_ts)
        if rng.random() < 0.06:
            tally["raise_after"] += 1
            raise Boom(f"after effects on {ctx.key}")
        tally["now"] += ctx.now_ms() == 4242

    def process_record(self, ctx: Context[Any], record: Record) -> None:
        self._act(ctx, _rng(record.id), record.timestamp)

    def process_timer(self, ctx: Context[Any], timer: Timer) -> None:
        self.seen[f"fired_{timer.domain.value}"] += 1
        self._act(ctx, _rng(timer.key, timer.tag, timer.timestamp, timer.domain.value), timer.timestamp)


class WeakDrawn(Drawn):
    options = Options(productions="weak")


class Run:
    """One core's applier over a fresh cache and timer queue, with a store of a few keys."""

    def __init__(
        self, name: CoreName, weak: bool, stored: dict[bytes, bytes], controls: NegativeControls = SAFE
    ) -> None:
        self.tally: Counter[str] = Counter()
        comp = (WeakDrawn if weak else Drawn)(self.tally)
        self.core = core(name)
        self.controls = controls
        self.cache = StateCache(state_codec_of(comp), lambda keys: [stored.get(k) for k in keys], max_keys=8)
        self.timers: Timers = self.core.timer_queue()
        self.counters = Counters()
        self.applier = self.core.applier(
            comp, self.cache, self.timers, dict(STREAMS), lambda: 4242, self.counters, controls, careful=False
        )
        self.log: list[Any] = []
        self.batch = Checkpoint()

    def records(self, items: list[Any], latency: bool, fault_at: int) -> Any:
        lat: Any = ([], [], 77) if latency else None
        try:
            ran = self.applier.records(
                items,
                self.batch,
                lat,
                fault_at,
                lambda: self.log.append("fault"),
                lambda i, exc: self.log.append(("bad", i, str(exc))),
                lambda r, exc: self.log.append(("failed", r.id, type(exc).__name__, str(exc))),
            )
        except RedoCareful as exc:
            return ("redo", exc.key, str(exc))
        return ran, lat

    def fire(self, domain: TimeDomain, limit: int, most: int | None) -> Any:
        def failed(entry: TimerEntry, fid: bytes, exc: Exception) -> None:
            self.log.append(("timer_failed", entry, fid, type(exc).__name__, str(exc)))

        try:
            return self.applier.fire(
                domain, limit, self.batch, failed, most, lambda: self.log.append("before")
            )
        except RedoCareful as exc:
            return ("redo", exc.key, str(exc))

    def commit(self) -> Any:
        """The batch made a checkpoint (state encoded once per dirty key), and a new one."""
        try:
            self.applier.encode_dirty(self.batch)
        except RedoCareful as exc:
            return ("redo", exc.key)
        done, self.batch = self.batch, Checkpoint()
        self.cache.trim()
        return done

    def outcome(self) -> Any:
        """Everything the runs left, comparable; the timer queue drained."""
        left = {d: self.timers.oldest(d) for d in DOMAINS}
        drained = []
        for d in DOMAINS:
            while (e := self.timers.pop_due(d, 2**62)) is not None:
                drained.append((e.key, e.tag, e.timestamp, e.domain, e.set_id))
        return (
            self.cache.values,
            dict(self.applier.dirty),
            self.counters,
            self.applier.take_weak(),
            self.log,
            left,
            drained,
        )


def _cp(cp: Any) -> Any:
    if not isinstance(cp, Checkpoint):
        return cp
    return (cp.state, cp.timers, cp.productions, cp.seen)


def scenario(seed: int, name: CoreName, controls: NegativeControls = SAFE) -> tuple[list[Any], Run]:
    rng = random.Random(seed)
    weak = seed % 5 == 0
    codec = JsonCodec[Any]()
    stored = {k.encode(): codec.encode({"n": i}) for i, k in enumerate(KEYS[:5])}
    run = Run(name, weak, stored, controls)
    steps: list[Any] = []
    ts = 1_000
    for chunk in range(rng.randrange(3, 8)):
        items: list[Any] = []
        for i in range(rng.randrange(0, 40)):
            if rng.random() < 0.05:
                items.append((i, ValueError(f"bad item {i}")))
                continue
            ts += rng.randrange(0, 4)
            rid = rng.randbytes(16)
            items.append(Record(rng.choice(KEYS), {"v": i}, ts, rid, "in", 0, chunk * 100 + i))
        steps.append(run.records(items, rng.random() < 0.5, rng.choice((-1, len(items) // 2))))
        for _ in range(rng.randrange(0, 3)):
            domain = rng.choice(DOMAINS)
            # at most 500 (as a worker caps them): a callback may re-arm timers in a cycle
            steps.append(run.fire(domain, ts + rng.randrange(-10, 50), rng.choice((None, 1, 3)) or 500))
        steps.append(_cp(run.commit()))
    steps.append(run.outcome())
    return steps, run


@pytest.mark.parametrize("seed", range(60))
def test_the_native_applier_does_what_the_reference_does(seed: int) -> None:
    want, _ = scenario(seed, "python")
    got, _ = scenario(seed, "native")
    assert got == want


@pytest.mark.parametrize("seed", range(20))
def test_with_fired_timers_kept_the_native_applier_does_what_the_reference_does(seed: int) -> None:
    """The path of ``MW_UNSAFE_KEEP_FIRED_TIMERS`` (a firing leaves its stored timer): the
    same on both."""
    keep = NegativeControls(keep_fired_timers=True)
    assert scenario(seed, "native", keep)[0] == scenario(seed, "python", keep)[0]


def test_the_kept_timers_scenarios_take_that_path() -> None:
    """... and the scenarios do take it: most leave another batch than the default does
    (the firings' deletions missing)."""
    keep = NegativeControls(keep_fired_timers=True)
    differ = sum(scenario(s, "native", keep)[0] != scenario(s, "native")[0] for s in range(20))
    assert differ >= 10, differ


def test_the_native_core_makes_the_objects_python_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``Timer`` user code gets and the ``Production`` s it makes are made in Rust
    without calling their types (``objects.rs``): they must be the very objects the
    types' constructors make (type, fields, ``==``, hash, repr, frozenness)."""
    timers: list[Timer] = []
    fire = Drawn.process_timer

    def keep(self: Drawn, ctx: Context, timer: Timer) -> None:
        timers.append(timer)
        fire(self, ctx, timer)

    monkeypatch.setattr(Drawn, "process_timer", keep)
    productions = [
        p
        for seed in range(12)
        for step in scenario(seed, "native")[0]
        if isinstance(step, tuple) and len(step) == 4
        for p in step[2]
    ]
    assert len(timers) > 50 and len(productions) > 50
    for t in timers:
        made = Timer(t.key, t.tag, t.timestamp, t.domain)
        assert type(t) is Timer and t == made and hash(t) == hash(made) and repr(t) == repr(made)
        assert dataclasses.asdict(t) == dataclasses.asdict(made)
        with pytest.raises(dataclasses.FrozenInstanceError):
            t.tag = "other"  # type: ignore[misc]
    for p in productions:
        assert type(p) is Production and p == Production(*p) and p._asdict() == Production(*p)._asdict()
        assert repr(p) == repr(Production(*p))


def test_the_drawn_scenarios_take_every_branch() -> None:
    """So that the comparison above covers each path of both appliers."""
    tally: Counter[str] = Counter()
    for seed in range(60):
        steps, run = scenario(seed, "native")
        tally += run.tally
        log = [e for s in steps for e in (s[4] if isinstance(s, tuple) and len(s) == 7 else [])]
        tally["logged_failed"] += sum(1 for e in log if isinstance(e, tuple) and e[0] == "failed")
        tally["logged_timer_failed"] += sum(1 for e in log if isinstance(e, tuple) and e[0] == "timer_failed")
        tally["logged_bad"] += sum(1 for e in log if isinstance(e, tuple) and e[0] == "bad")
        tally["redo"] += sum(1 for s in steps if isinstance(s, tuple) and s and s[0] == "redo")
        at_commit = [s for s in steps if s.__class__ is tuple and len(s) == 2 and s[0] == "redo"]
        tally["redo_at_commit"] += len(at_commit)
        tally["weak_productions"] += len(steps[-1][3])
    wanted = [
        "raise_before", "raise_after", "absent", "set_in_place", "set_anew", "clear", "get_after_clear",
        "timer_clear", "timer_set_event", "timer_set_wall", "timer_set_hold", "production",
        "late_production", "undeclared", "now", "fired_event", "fired_wall", "logged_failed",
        "logged_timer_failed", "logged_bad", "redo", "weak_productions", "state_inf", "state_big",
        "state_set", "redo_at_commit", "headers_good", "headers_refused",
    ]  # fmt: skip
    thin = {name: tally[name] for name in wanted if tally[name] < 3}
    assert not thin, f"branches taken fewer than 3 times: {thin}"


def test_the_native_timer_queue_orders_as_the_reference_does() -> None:
    rng = random.Random(7)
    queues = [core("python").timer_queue(), core("native").timer_queue()]
    out: list[list[Any]] = [[], []]
    for _ in range(3000):
        op = rng.random()
        key, tag = rng.choice(KEYS[:6]), rng.choice("xyz")
        entry = TimerEntry(
            key, tag, rng.randrange(0, 200), rng.choice(DOMAINS), rng.randbytes(rng.choice((0, 16)))
        )
        d, limit = rng.choice(DOMAINS), rng.randrange(0, 220)
        for q, o in zip(queues, out, strict=True):
            if op < 0.6:
                q.set(entry)
            elif op < 0.75:
                o.append(bool(q.clear(key, tag)))
            elif op < 0.9:
                o.append(q.oldest(d))
            elif op < 0.999:
                o.append(q.pop_due(d, limit))
            else:
                q.clear_all()
            o.append(len(q))
    assert out[0] == out[1]


def test_the_native_context_refuses_what_is_no_time_domain() -> None:
    """A domain that is no ``TimeDomain`` fails the call (the reference fails later, when
    the timer is stored); either way user code's error, not the worker's."""
    run = Run("native", weak=False, stored={})

    class Odd(Computation):
        name = "odd"

        def process_record(self, ctx: Context, record: Record) -> None:
            ctx.timers.set("t", 5, "event")  # type: ignore[arg-type]

    run.applier = run.core.applier(Odd(), run.cache, run.timers, {}, lambda: 0, run.counters, SAFE, False)
    assert run.records([Record("k", {}, 1, b"i" * 16, "in", 0, 0)], False, -1) == (1, None)
    assert run.log == [("failed", b"i" * 16, "TypeError", "event is not a TimeDomain")]
    assert not run.timers


@pytest.mark.parametrize("name", ["python", "native"])
def test_what_is_no_exception_of_user_code_passes_through(name: CoreName) -> None:
    """``KeyboardInterrupt`` or ``SystemExit`` in user code stops the worker: neither
    applier dead-letters the record (it would be lost, marked seen)."""
    run = Run(name, weak=False, stored={})

    class Stopped(Computation):
        name = "stopped"

        def process_record(self, ctx: Context, record: Record) -> None:
            ctx.state.set({"half": "done"})
            raise KeyboardInterrupt

    run.applier = run.core.applier(Stopped(), run.cache, run.timers, {}, lambda: 0, run.counters, SAFE, False)
    with pytest.raises(KeyboardInterrupt):
        run.records([Record("k", {}, 1, b"i" * 16, "in", 0, 0)], False, -1)
    assert run.log == [] and run.batch.seen == {}
