"""A batch built while the previous one's checkpoint is in flight (overlapping commits):
what the next batch reads of the one before stays right (``interval.py``), on the
in-memory store. Each test fails if its mechanism is taken out (named in its docstring)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from test_failures import FakeConsumer
from test_interval import IV, make_deps, message, registry

from mwcore import Context, Record, TimeDomain, Timer
from mwcore.api.clock import MAX_WATERMARK
from mwcore.cores import core
from mwcore.errors import FencedError
from mwcore.examples.running_sum import RunningSum
from mwcore.runtime.config import WorkerConfig
from mwcore.runtime.interval import Interval, PreparedCommit
from mwcore.runtime.worker import Worker
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.checkpoint import Checkpoint
from mwcore.store.interface import IntervalId
from mwcore.store.memory_store import MemoryCheckpointStore
from mwcore.watermarks.source import FixedWatermark


def land(interval: Interval, store: MemoryCheckpointStore, prepared: PreparedCommit | None) -> None:
    """The commit in flight lands."""
    assert prepared is not None
    interval.committed(prepared, store.commit(IV, interval.token, prepared.checkpoint))


def owner(
    registry: SchemaRegistry, store: MemoryCheckpointStore, computation: Any = None, **config: Any
) -> Interval:
    """An interval whose batches overlap their commits (the default), of ``computation``
    (else the running sum), configured by ``config``."""
    deps = make_deps(registry, store, **config)
    if computation is not None:
        deps = dataclasses.replace(deps, computation=computation)
    return Interval(IV, store.recover(IV, store.grant(IV, "a")), deps)


__all__ = ["registry"]  # test_interval's fixture, used here


@pytest.fixture
def store() -> MemoryCheckpointStore:
    return MemoryCheckpointStore()


def test_a_duplicate_of_a_record_in_flight_is_dropped(
    registry: SchemaRegistry, store: MemoryCheckpointStore
) -> None:
    """The next batch's seen ids start with the ids in flight (neither the filter nor
    the store has them yet)."""
    interval = owner(registry, store)
    a, b = b"a" * 16, b"b" * 16
    interval.process([message(registry, 0, "k", 5, a)])
    flying = interval.prepare()
    interval.process([message(registry, 1, "k", 5, a), message(registry, 2, "k", 2, b)])  # a again
    land(interval, store, flying)
    land(interval, store, interval.prepare())
    assert interval.deps.counters.duplicates == 1
    assert interval.cache.get("k").total == 7
    assert set(store.recover(IV, "").seen) == {a, b}


@pytest.mark.parametrize("whole_state_bytes", [0, 1 << 20], ids=["each-key", "whole-state-read"])
def test_state_forgotten_by_the_cache_is_read_from_the_checkpoint_in_flight(
    registry: SchemaRegistry, store: MemoryCheckpointStore, whole_state_bytes: int
) -> None:
    """``_load`` reads the checkpoint in flight before the store: a key the cache let go
    of when its batch closed, or dropped to undo a failed call, is not read stale (also
    when the interval's whole state was read at acquisition: ``MW_WHOLE_STATE_MB``)."""
    interval = owner(registry, store, max_cache_keys=1, whole_state_mb=whole_state_bytes >> 20)
    assert interval.cache.knows_all == bool(whole_state_bytes)
    interval.process([message(registry, 0, "k", 5, b"1" * 16), message(registry, 1, "j", 1, b"2" * 16)])
    flying = interval.prepare()
    assert "k" not in interval.cache.values  # trimmed: one key kept, the last used
    interval.process([message(registry, 2, "k", 2, b"3" * 16)])
    assert interval.cache.get("k").total == 7  # 5 in flight, + 2
    land(interval, store, flying)

    interval.process([message(registry, 3, "j", 4, b"4" * 16)])
    flying = interval.prepare()  # j = 5 in flight, and the cache keeps j only
    interval.process([message(registry, 4, "j", -1, b"5" * 16)])  # fails: the undo drops j
    interval.process([message(registry, 5, "j", 10, b"6" * 16)])
    land(interval, store, flying)
    land(interval, store, interval.prepare())
    assert interval.cache.get("j").total == 15
    assert interval.deps.counters.dead_letters == 1


class Delayed(RunningSum):
    """Produces 100 ms of event time after each record, from an event timer."""

    def process_record(self, ctx: Context, record: Record) -> None:
        ctx.timers.set("later", record.timestamp + 100, TimeDomain.EVENT)

    def process_timer(self, ctx: Context, timer: Timer) -> None:
        ctx.produce("sums", {"key": ctx.key, "total": 1, "count": 1}, timer.timestamp)


def test_a_report_counts_the_timers_of_its_checkpoint_that_a_later_batch_fired(
    registry: SchemaRegistry, store: MemoryCheckpointStore
) -> None:
    """A report shows the last durable checkpoint; a later batch (open, or in flight)
    fired its timer, whose production is in that batch, not in the outbox: the report's
    oldest work still counts the timer (``PreparedCommit.oldest_timer``)."""
    interval = owner(registry, store, computation=Delayed())
    interval.process([message(registry, 0, "k", 1, b"1" * 16)])  # timestamp 1000: a timer at 1100
    land(interval, store, interval.prepare())
    assert interval.fire_timers(watermark=5000, now_ms=0) == 1  # into the open batch
    assert interval.reports.oldest_work() == MAX_WATERMARK  # the queue and outbox: empty
    assert interval.reportable()
    draft = interval.report(now_ms=1)
    assert draft is not None and draft.report.oldest == 1100 and draft.commits == 1
    flying = interval.prepare()  # and while that batch is in flight
    draft = interval.report(now_ms=2)
    assert draft is not None and draft.report.oldest == 1100 and draft.commits == 1
    land(interval, store, flying)
    draft = interval.report(now_ms=3)
    assert draft is not None and draft.commits == 2
    assert draft.report.oldest == 1100  # the production now waits in the outbox


def test_without_overlap_only_an_idle_interval_reports(
    registry: SchemaRegistry, store: MemoryCheckpointStore
) -> None:
    interval = Interval(IV, store.recover(IV, store.grant(IV, "a")), make_deps(registry, store))
    interval.process([message(registry, 0, "k", 1, b"1" * 16)])
    assert not interval.reportable()
    flying = interval.prepare()
    assert not interval.idle() and not interval.reportable()  # in flight
    land(interval, store, flying)
    assert interval.idle() and interval.reportable()


def test_a_new_owner_reports_only_once_a_checkpoint_of_its_own_is_durable(
    registry: SchemaRegistry, store: MemoryCheckpointStore
) -> None:
    """Its first batch holds where newly assigned partitions start."""
    interval = owner(registry, store)
    interval.start_at("numbers", 0, 42)
    assert not interval.reportable()
    land(interval, store, interval.prepare())
    interval.process([message(registry, 42, "k", 1, b"1" * 16)])
    assert interval.reportable()
    draft = interval.report(now_ms=1)
    assert draft is not None and draft.report.positions == {"numbers:0": 42}


class Early(RunningSum):
    """Sets an event timer below its record's time, and produces at the timer's."""

    def process_record(self, ctx: Context, record: Record) -> None:
        ctx.timers.set("early", 50, TimeDomain.EVENT)

    def process_timer(self, ctx: Context, timer: Timer) -> None:
        ctx.produce("sums", {"key": ctx.key, "total": 1, "count": 1}, timer.timestamp)


def test_a_report_counts_a_timer_set_and_fired_after_its_checkpoint(
    registry: SchemaRegistry, store: MemoryCheckpointStore
) -> None:
    """A later batch sets a timer below its record's time (the record, in the input
    backlog, holds only at its own) and fires it: its production, in the open batch or
    the one in flight, is in neither the queue nor the outbox
    (``Interval._after_durable`` counts it)."""
    interval = owner(registry, store, computation=Early())
    interval.start_at("numbers", 0, 0)
    land(interval, store, interval.prepare())  # durable: nothing read yet
    interval.process([message(registry, 0, "k", 1, b"1" * 16)])  # timestamp 1000, a timer at 50
    assert interval.fire_timers(watermark=60, now_ms=0) == 1
    assert interval.reports.oldest_work() == MAX_WATERMARK  # the queue and outbox: empty
    draft = interval.report(now_ms=1)
    assert draft is not None and draft.report.oldest == 50 and draft.commits == 1
    flying = interval.prepare()
    draft = interval.report(now_ms=2)
    assert draft is not None and draft.report.oldest == 50 and draft.commits == 1
    land(interval, store, flying)
    draft = interval.report(now_ms=3)
    assert draft is not None and draft.commits == 2 and draft.report.oldest == 50  # in the outbox


class HeldStore(MemoryCheckpointStore):
    """Holds each commit turn until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def commit_many(self, commits: Sequence[tuple[IntervalId, str, Checkpoint]]) -> list[int | FencedError]:
        self.release.wait(10)
        return super().commit_many(commits)


def test_the_worker_builds_the_next_batch_while_a_commit_is_in_flight_and_sends_after_it(
    registry: SchemaRegistry,
) -> None:
    """The worker's loop goes on while the store holds a commit turn; the turn's
    productions leave only once it is durable."""
    store = HeldStore()
    config = WorkerConfig(
        bootstrap="127.0.0.1:9", max_batch_records=2, max_batch_delay_ms=60_000, witness_gate=False
    )
    worker = Worker(RunningSum(), config, store, registry, FixedWatermark(), core=core("python"))
    msgs = [message(registry, i, "k", i + 1, bytes([i + 1]) * 16) for i in range(3)]
    worker.consumer = FakeConsumer([msgs[:2], msgs[2:]])  # type: ignore[assignment]
    worker.acquire(0)
    iv = IntervalId("default", "running_sum", 0)
    worker.step()  # two records: the batch is full, its commit sent
    worker.step()  # the third record, into the next batch, while the store holds the commit
    assert worker.intervals[0].cache.get("k").total == 6
    assert store.recover(iv, "").commits == 0 and worker.counters.productions == 0
    store.release.set()
    deadline = time.monotonic() + 5
    while store.recover(iv, "").commits == 0 or worker.counters.commits == 0:
        assert time.monotonic() < deadline, "the commit was never taken"
        worker.step()
    assert worker.counters.productions == 2  # the durable batch's, not the open one's
    assert store.recover(iv, "").positions == {"numbers:0": 2}
