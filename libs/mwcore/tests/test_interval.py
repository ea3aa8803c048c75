"""Unit tests of one interval's batch logic on the in-memory store (no broker, no Redis)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message

from mwcore import Context, Record, TimeDomain
from mwcore.api import ids
from mwcore.api.clock import MAX_WATERMARK
from mwcore.api.computation import state_codec_of
from mwcore.cores import core
from mwcore.examples.running_sum import RunningSum
from mwcore.runtime.config import WorkerConfig
from mwcore.runtime.intake import InputBinding
from mwcore.runtime.interval import Interval
from mwcore.runtime.interval_deps import IntervalDeps
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.store.checkpoint_wire import field_of
from mwcore.store.interface import IntervalId
from mwcore.store.memory_store import MemoryCheckpointStore

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
IV = IntervalId("unit", "running_sum", 0)


@pytest.fixture
def registry() -> SchemaRegistry:
    return SchemaRegistry.from_directory(SCHEMAS)


def make_deps(
    registry: SchemaRegistry, store: MemoryCheckpointStore, now: int = 0, **config: Any
) -> IntervalDeps:
    """On the Python core, productions not gated by a witness and each key read on first
    use unless ``config`` says otherwise."""
    comp = RunningSum()
    state_codec_of(comp).bind(registry)
    sums = AvroSerde(registry, "mw.examples.Sum").encode
    config = {"witness_gate": False, "whole_state_mb": 0, **config}
    return IntervalDeps(
        computation=comp,
        store=store,
        core=core("python"),
        config=WorkerConfig(bootstrap="127.0.0.1:9", **config),
        codec=state_codec_of(comp),
        inputs={"numbers": InputBinding("numbers", AvroSerde(registry, "mw.examples.Number"))},
        encoders={"sums": ("sums", sums), "totals": ("totals", sums)},
        dead_letter_topic="running_sum.dead-letters",
        clock=lambda: now,
    )


def message(registry: SchemaRegistry, offset: int, key: str, n: int, rid: bytes) -> Message:
    value = AvroSerde(registry, "mw.examples.Number").encode({"n": n})
    return Message(
        topic="numbers",
        partition=0,
        offset=offset,
        key=key.encode(),
        value=value,
        headers=[("mw-id", rid)],
        timestamp=(1, 1000 + offset),
    )


def commit(interval: Interval, store: MemoryCheckpointStore) -> list[bytes]:
    cp = interval.prepare()
    interval.committed(cp, store.commit(IV, interval.token, cp.checkpoint))
    return [p.id for batch in interval.take_to_send() for p in batch.productions]


def test_duplicates_dropped_within_and_across_batches(registry: SchemaRegistry) -> None:
    store = MemoryCheckpointStore()
    interval = Interval(IV, store.recover(IV, store.grant(IV, "a")), make_deps(registry, store))
    a, b = b"a" * 16, b"b" * 16
    interval.process([message(registry, 0, "k", 1, a), message(registry, 1, "k", 2, a)])
    commit(interval, store)
    interval.process([message(registry, 2, "k", 5, a), message(registry, 3, "k", 7, b)])
    commit(interval, store)
    assert interval.cache.get("k").total == 8 and interval.deps.counters.duplicates == 2
    assert store.recover(IV, "").positions == {"numbers:0": 4}


def test_productions_leave_only_after_the_commit_and_are_deleted_after_acks(registry: SchemaRegistry) -> None:
    store = MemoryCheckpointStore()
    interval = Interval(IV, store.recover(IV, store.grant(IV, "a")), make_deps(registry, store))
    rid = b"r" * 16
    interval.process([message(registry, 0, "k", 3, rid)])
    assert interval.take_to_send() == []  # nothing to send before the checkpoint
    cp = interval.prepare()
    interval.committed(cp, store.commit(IV, interval.token, cp.checkpoint))
    [batch] = interval.take_to_send()
    assert [p.id for p in batch.productions] == [ids.derive(rid, 0)]
    assert len(store.recover(IV, "").pending) == 1
    for offset, _ in enumerate(batch.productions):
        batch(None, Acked("sums", 0, offset))  # Kafka acknowledges
    assert interval.outbox.oldest() == batch.productions[0].timestamp  # still held
    commit(interval, store)
    # The pending copy is deleted and, in the same commit, its backlog segment stored:
    # an acknowledged production is never sent again, yet still holds the watermark.
    snap = store.recover(IV, "")
    assert snap.pending == {}
    [segments] = snap.segments.values()
    assert [(s.topic, s.partition, s.end, s.count) for s in segments] == [("sums", 0, 1, 1)]
    assert segments[0].min_ts == batch.productions[0].timestamp
    assert interval.idle()
    draft = interval.report(now_ms=0)
    assert draft is not None
    report = draft.report
    assert report.segments == tuple(segments)
    assert interval.outbox.oldest(handing_over=True) == MAX_WATERMARK  # what the report counts
    assert interval.outbox.oldest() == batch.productions[0].timestamp  # until the report is written
    interval.reports.reported(draft)
    assert interval.outbox.oldest() == MAX_WATERMARK  # left the oldest work with the report
    commit(interval, store)
    assert store.recover(IV, "").segments == {}


class Acked:
    """What a delivery callback reads of an acknowledged message."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._t, self._p, self._o = topic, partition, offset

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o


def test_recovery_reexecutes_with_the_same_ids(registry: SchemaRegistry) -> None:
    store = MemoryCheckpointStore()
    first = Interval(IV, store.recover(IV, store.grant(IV, "a")), make_deps(registry, store))
    msgs = [message(registry, i, f"k{i % 3}", i, bytes([i]) * 16) for i in range(10)]
    first.process(msgs[:5])
    commit(first, store)
    first.process(msgs[5:])  # never committed: the process dies here
    lost = [p.id for p in first.batch.productions]

    second = Interval(IV, store.recover(IV, store.grant(IV, "b")), make_deps(registry, store))
    assert store.recover(IV, "").positions == {"numbers:0": 5}
    resent = [p.id for b in second.take_to_send() for p in b.productions]
    assert resent == [ids.derive(bytes([i]) * 16, 0) for i in range(5)]  # pending, sent again
    second.process(msgs[5:])
    assert commit(second, store) == lost


def test_timers_fire_in_order_once_and_their_deletion_is_checkpointed(registry: SchemaRegistry) -> None:
    store = MemoryCheckpointStore()
    deps = make_deps(registry, store, now=10_000)
    interval = Interval(IV, store.recover(IV, store.grant(IV, "a")), deps)
    interval.process([message(registry, 0, "a", 1, b"1" * 16), message(registry, 1, "b", 2, b"2" * 16)])
    commit(interval, store)
    assert len(store.recover(IV, "").timers) == 2  # one wall-time flush timer per key
    assert interval.fire_timers(watermark=0, now_ms=10_000 + 199) == 0
    assert interval.fire_timers(watermark=0, now_ms=10_000 + 200) == 2
    assert interval.batch.timers == {field_of("a", "flush"): None, field_of("b", "flush"): None}
    commit(interval, store)
    assert store.recover(IV, "").timers == []
    assert interval.fire_timers(watermark=0, now_ms=99_999) == 0


def test_bad_records_become_dead_letters_and_are_marked_seen(registry: SchemaRegistry) -> None:
    store = MemoryCheckpointStore()
    interval = Interval(IV, store.recover(IV, store.grant(IV, "a")), make_deps(registry, store))
    corrupt = Message(
        topic="numbers",
        partition=0,
        offset=0,
        key=b"k",
        value=b"junk",
        headers=[("mw-id", b"c" * 16)],
        timestamp=(1, 5),
    )
    negative = message(registry, 1, "k", -3, b"n" * 16)
    interval.process([corrupt, negative, message(registry, 2, "k", 4, b"g" * 16)])
    cp = interval.prepare()
    dead = [p for p in cp.checkpoint.productions if p.topic == "running_sum.dead-letters"]
    assert [dict(p.headers)["mw-source-offset"] for p in dead] == [b"0", b"1"]
    assert b"negative amount" in dict(dead[1].headers)["mw-error"]
    assert set(cp.checkpoint.seen) == {b"c" * 16, b"n" * 16, b"g" * 16}
    interval.committed(cp, store.commit(IV, interval.token, cp.checkpoint))
    assert interval.cache.get("k").total == 4


class Holder(RunningSum):
    """Holds the watermark at its key's last record; releases on n == 0."""

    def process_record(self, ctx: Context, record: Record) -> None:
        if record.value["n"]:
            ctx.timers.set("buffer", record.timestamp, TimeDomain.HOLD)
        else:
            ctx.timers.clear("buffer")


def test_watermark_holds_count_as_oldest_work_never_fire_and_survive_recovery(
    registry: SchemaRegistry,
) -> None:
    store = MemoryCheckpointStore()
    deps = dataclasses.replace(make_deps(registry, store), computation=Holder())
    interval = Interval(IV, store.recover(IV, store.grant(IV, "a")), deps)
    interval.process([message(registry, 0, "a", 1, b"1" * 16), message(registry, 1, "b", 1, b"2" * 16)])
    commit(interval, store)
    assert interval.reports.oldest_work() == 1000  # message timestamps are 1000 + offset
    assert interval.fire_timers(watermark=MAX_WATERMARK, now_ms=MAX_WATERMARK - 1) == 0
    again = Interval(IV, store.recover(IV, store.grant(IV, "b")), deps)
    assert again.reports.oldest_work() == 1000
    again.process([message(registry, 2, "a", 0, b"3" * 16)])  # releases key a's hold
    commit(again, store)
    assert again.reports.oldest_work() == 1001


def test_a_held_report_goes_out_once_witnessed_even_when_the_witness_is_slower_than_reports(
    registry: SchemaRegistry,
) -> None:
    """Gated: a report waits for the witness of its checkpoint. Under load a new commit
    comes every few ms and the witness answers later than the next report is due; the
    held report must still go out once the witness covers it, not be replaced by a
    newer one the answer cannot cover yet (that starved every report of a busy
    interval: its watermark stood still)."""
    store = MemoryCheckpointStore()
    deps = make_deps(registry, store, witness_gate=True)
    interval = Interval(IV, store.recover(IV, store.grant(IV, "a")), deps)
    interval.reports.witness(0)
    sent = []
    for n in range(6):  # a commit, a report due, then the witness of an earlier commit
        interval.process([message(registry, n, "k", 1, bytes([n + 1]) * 16)])
        commit(interval, store)
        assert interval.idle()
        draft = interval.report(now_ms=n)
        if draft is not None:
            sent.append(draft)
        released = interval.reports.witness(interval.commits - 1)  # always one commit behind
        if released is not None:
            sent.append(released)
    assert sent, "no report went out: starved"
    assert all(d.commits <= interval.commits - 1 for d in sent)  # never ahead of the witness
