"""A panic of the native core, contained (``native/src/errors.rs``): in per-record code
it is the package's ``InternalError``, which the record path makes a dead letter as it
does any failed call (the call undone, the chunk's other records applied); anywhere
else it stops the process with one line and exit code 70 (``process/bootstrap.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from mwcore import Computation, Context, Record
from mwcore.api.computation import state_codec_of
from mwcore.controls import SAFE
from mwcore.cores import core, panic_on_key
from mwcore.errors import InternalError
from mwcore.process import bootstrap
from mwcore.runtime import dead_letters
from mwcore.runtime.counters import Counters
from mwcore.runtime.state_cache import StateCache
from mwcore.store.checkpoint import Checkpoint
from testbed.native import requires_native, rust

pytestmark = requires_native

KEY = "\x00the key the native core panics on (test_panics.py)"  # (set once per process)


class Count(Computation[Any]):
    name = "count"

    def process_record(self, ctx: Context[Any], record: Record) -> None:
        ctx.state.set((ctx.state.get() or 0) + 1)
        ctx.produce("out", record.value, record.timestamp)


def test_a_panic_in_per_record_code_fails_that_record_alone_and_leaves_no_trace() -> None:
    panic_on_key(KEY)
    comp = Count()
    cache = StateCache(
        state_codec_of(comp), lambda keys: [b"41" if k == KEY.encode() else None for k in keys], max_keys=8
    )
    native = core("native")
    timers = native.timer_queue()
    applier = native.applier(comp, cache, timers, {"out": ("o", repr)}, lambda: 0, Counters(), SAFE, False)
    batch = Checkpoint()
    items: list[Any] = [
        Record(key, {"n": i}, 10 + i, bytes([i]) * 16, "in", 0, i)
        for i, key in enumerate(["a", KEY, "a", "b"])
    ]
    failed: list[tuple[Record, BaseException]] = []
    ran = applier.records(
        items, batch, None, -1, lambda: None, lambda i, e: None, lambda r, e: failed.append((r, e))
    )
    applier.encode_dirty(batch)
    assert ran == 4
    assert [(r.key, type(e)) for r, e in failed] == [(KEY, InternalError)]
    assert "a panic in the native core" in str(failed[0][1]) and "MW_PANIC_KEY" in str(failed[0][1])
    assert dead_letters.reason(failed[0][1]) == "internal_error"
    assert batch.state == {b"a": b"2", b"b": b"1"}  # the key's state as it was, not written
    assert cache.get(KEY) == 41
    assert [p.key for p in batch.productions] == [b"a", b"a", b"b"]
    assert set(batch.seen) == {
        bytes([i]) * 16 for i in (0, 2, 3)
    }  # its id not seen: the caller dead-letters it


def test_a_panic_elsewhere_stops_the_process_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> int:
        raise rust.PanicException("called `Option::unwrap()` on a `None` value")

    assert bootstrap.main(body, prog="mw") == bootstrap.PANICKED == 70
    err = capsys.readouterr().err.splitlines()
    said = "called `Option::unwrap()` on a `None` value"
    assert err == [f"mw: stopped: a bug in the native core (its panic is above): {said}"]


def test_what_is_no_panic_is_not_taken_for_one() -> None:
    def body() -> int:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        bootstrap.main(body)
