"""The fault suite's computation: every kind of effect the runtime must keep exact.

Per record: the key's running sum and count (per-key state) and one strong production
to ``chaos_echo`` carrying them, so a lost, repeated or reordered record shows in the
payload. Per key and one-second event-time window: a count, produced to
``chaos_windows`` by an event-time timer at the window's end (an early watermark
shows as a wrong count or a second result). Every ``TIMER_EVERY``-th record of a key
sets a wall-time timer ``WALL_DELAY_MS`` ahead; its firing, produced to
``chaos_timers``, says when it was due and when it fired.
"""

from __future__ import annotations

from typing import Any

from mwcore import Computation, Context, Input, Options, Output, Record, TimeDomain, Timer

WINDOW_MS = 1000
TIMER_EVERY = 25
WALL_DELAY_MS = 1000


class ChaosCount(Computation[dict[str, Any]]):
    name = "chaos"
    inputs = (Input("chaos_in", schema="mw.examples.Number"),)
    outputs = (
        Output("chaos_echo", schema="mw.bench.ChaosEcho"),
        Output("chaos_windows", schema="mw.bench.ChaosWindow"),
        Output("chaos_timers", schema="mw.bench.ChaosTimer"),
    )
    partitions = 6

    def process_record(self, ctx: Context[dict[str, Any]], record: Record) -> None:
        st = ctx.state.get() or {"total": 0, "count": 0, "w": {}}
        n = record.value["n"]
        st["total"] += n
        st["count"] += 1
        echo = {"key": ctx.key, "n": n, "total": st["total"], "count": st["count"]}
        ctx.produce("chaos_echo", echo, record.timestamp)
        start = record.timestamp // WINDOW_MS * WINDOW_MS
        windows = st["w"]
        if str(start) not in windows:
            ctx.timers.set(f"w{start}", start + WINDOW_MS - 1, TimeDomain.EVENT)
        windows[str(start)] = windows.get(str(start), 0) + 1
        if st["count"] % TIMER_EVERY == 0:
            ctx.timers.set(f"t{st['count']}", ctx.now_ms() + WALL_DELAY_MS, TimeDomain.WALL)
        ctx.state.set(st)

    def process_timer(self, ctx: Context[dict[str, Any]], timer: Timer) -> None:
        st = ctx.state.get() or {"total": 0, "count": 0, "w": {}}
        if timer.domain is TimeDomain.EVENT:
            start = timer.timestamp + 1 - WINDOW_MS
            count = st["w"].pop(str(start), 0)
            ctx.produce("chaos_windows", {"key": ctx.key, "start": start, "count": count}, timer.timestamp)
            ctx.state.set(st)
        else:
            fired = {"key": ctx.key, "tag": timer.tag, "due": timer.timestamp, "fired": ctx.now_ms()}
            ctx.produce("chaos_timers", fired, timer.timestamp)


class TransactionalChaosCount(ChaosCount):
    """The same computation with transactional productions (``--delivery transactional``)."""

    options = Options(productions="transactional")
