"""Regression tests for failure paths found in review: each would lose or corrupt data
(or loop forever) without its fix. In-memory store, no broker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message

from mwcore import Computation, Context, Input, JsonCodec, Options, Output, Record, Timer
from mwcore.api.clock import MAX_WATERMARK
from mwcore.api.computation import state_codec_of
from mwcore.api.record import TimeDomain
from mwcore.cores import core
from mwcore.runtime.config import Tuning, WorkerConfig
from mwcore.runtime.intake import InputBinding
from mwcore.runtime.interval import Interval
from mwcore.runtime.interval_deps import IntervalDeps
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.store.checkpoint import TimerEntry
from mwcore.store.checkpoint_wire import decode_entry, encode_entry, field_of
from mwcore.store.interface import IntervalId
from mwcore.store.memory_store import MemoryCheckpointStore

PY = core("python")

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
IV = IntervalId("unit", "probe", 0)


@dataclass
class Tally:
    total: int = 0


class Probe(Computation[Tally]):
    """Adds n in place, then misbehaves as the record asks (n encodes the behaviour)."""

    name = "probe"
    inputs = (Input("numbers", schema="mw.examples.Number"),)
    outputs = (Output("sums", schema="mw.examples.Sum"),)

    def process_record(self, ctx: Context[Tally], record: Record) -> None:
        st: Tally = ctx.state.get() or Tally()
        st.total += record.value["n"]  # mutates the cached object in place
        if record.value["n"] == 13:
            raise RuntimeError("unlucky")
        ctx.state.set(st if record.value["n"] != 7 else object())  # 7: unencodable state
        ctx.timers.set("tick", 100, TimeDomain.EVENT)

    def process_timer(self, ctx: Context[Tally], timer: Timer) -> None:
        ctx.produce("sums", {"key": ctx.key, "total": 0, "count": 0}, timer.timestamp)
        ctx.timers.set("tick", timer.timestamp + 1, TimeDomain.EVENT)  # re-arms itself


class WeakProbe(Probe):
    options = Options(productions="weak")
    state_codec = JsonCodec[Any]()

    def process_record(self, ctx: Context, record: Record) -> None:
        ctx.timers.set("once", 5, TimeDomain.EVENT)

    def process_timer(self, ctx: Context, timer: Timer) -> None:
        ctx.produce("sums", {"key": ctx.key, "total": 1, "count": 1}, timer.timestamp)


def make(
    comp: Computation, careful_until: dict[str, int] | None = None
) -> tuple[Interval, MemoryCheckpointStore, SchemaRegistry]:
    registry = SchemaRegistry.from_directory(SCHEMAS)
    store = MemoryCheckpointStore()
    state_codec_of(comp).bind(registry)
    deps = IntervalDeps(
        computation=comp,
        store=store,
        core=core("python"),
        config=WorkerConfig(bootstrap="127.0.0.1:9"),
        codec=state_codec_of(comp),
        inputs={"numbers": InputBinding("numbers", AvroSerde(registry, "mw.examples.Number"))},
        encoders={"sums": ("sums", AvroSerde(registry, "mw.examples.Sum").encode)},
        dead_letter_topic="dlq",
    )
    interval = Interval(IV, store.recover(IV, store.grant(IV, "a")), deps, careful_until=careful_until)
    return interval, store, registry


def msg(registry: SchemaRegistry, offset: int, n: int) -> Message:
    value = AvroSerde(registry, "mw.examples.Number").encode({"n": n})
    return Message(topic="numbers", partition=0, offset=offset, key=b"k", value=value,
                   headers=[("mw-id", bytes([offset + 1]) * 16)], timestamp=(1, offset))  # fmt: skip


def test_failed_call_leaves_no_trace_even_after_in_place_mutation() -> None:
    interval, _, registry = make(Probe(), careful_until={})  # each call's state encoded at once
    interval.process([msg(registry, 0, 100), msg(registry, 1, 13), msg(registry, 2, 1)])
    assert interval.cache.get("k").total == 101  # not 114: the failed call's mutation is undone
    cp = interval.prepare()
    assert [p.topic for p in cp.checkpoint.productions] == ["dlq"]


def test_unencodable_state_dead_letters_its_record_instead_of_failing_the_commit() -> None:
    interval, store, registry = make(Probe(), careful_until={})
    interval.process([msg(registry, 0, 5), msg(registry, 1, 7), msg(registry, 2, 1)])
    cp = interval.prepare()
    [dead] = [p for p in cp.checkpoint.productions if p.topic == "dlq"]
    assert b"cannot be encoded" in dict(dead.headers)["mw-error"]
    interval.committed(cp, store.commit(IV, interval.token, cp.checkpoint))
    assert store.load_state(IV, [b"k"]) == [b'{"total":6}']


def test_state_is_encoded_once_per_key_per_batch_and_a_failure_it_cannot_undo_asks_for_a_redo() -> None:
    from mwcore.runtime.effects import RedoCareful

    interval, store, registry = make(Probe())
    interval.process([msg(registry, 0, 13)])  # fails on a key the batch has not changed: undone here
    interval.process([msg(registry, 1, 100), msg(registry, 2, 1)])
    assert interval.batch.state == {}  # not encoded per call
    cp = interval.prepare()
    assert cp is not None and cp.checkpoint.state == {b"k": b'{"total":101}'}
    interval.committed(cp, store.commit(IV, interval.token, cp.checkpoint))
    interval.process([msg(registry, 3, 5)])
    with pytest.raises(RedoCareful):  # k's last good value (106) exists only as the mutated object
        interval.process([msg(registry, 4, 13)])
    interval, store, registry = make(Probe())
    interval.process([msg(registry, 0, 5), msg(registry, 1, 7)])
    with pytest.raises(RedoCareful):  # unencodable: found when the batch is made a checkpoint
        interval.prepare()


def test_a_self_rearming_timer_fires_max_batch_records_times_a_turn_and_its_batches_commit() -> None:
    """Under the end of time a timer that re-arms itself is always due: the worker's loop
    fires it at most ``max_batch_records`` times a turn, so each turn's batch commits."""
    from mwcore.runtime.worker import Worker
    from mwcore.watermarks.source import FixedWatermark

    registry = SchemaRegistry.from_directory(SCHEMAS)
    store = MemoryCheckpointStore()
    limit = 37
    # commits waited for: the store shows each turn's commit when the turn ends
    config = WorkerConfig(bootstrap="127.0.0.1:9", max_batch_records=limit)
    tuning = Tuning(overlap_commits=False)
    worker = Worker(Probe(), config, store, registry, FixedWatermark(MAX_WATERMARK), core=PY, tuning=tuning)
    worker.consumer = FakeConsumer([[msg(registry, 0, 1)]])  # type: ignore[assignment]
    worker.acquire(0)
    iv = IntervalId("default", "probe", 0)
    worker.step()  # the record, which sets the timer
    assert worker.counters.timers_fired == 0
    for turn in range(1, 5):
        before = worker.counters.timers_fired
        worker.step()
        assert worker.counters.timers_fired - before == limit
        assert store.recover(iv, "").commits >= turn  # the turn's batch committed
    assert len(worker.intervals[0].timers) == 1  # and the timer is still set


def test_weak_productions_made_by_timers_are_in_the_checkpoint() -> None:
    interval, store, registry = make(WeakProbe())
    interval.process([msg(registry, 0, 1)])
    cp = interval.prepare()
    interval.committed(cp, store.commit(IV, interval.token, cp.checkpoint))
    interval.take_to_send()
    assert interval.fire_timers(10, 0) == 1
    cp = interval.prepare()  # the firing's production has not been sent yet
    assert [p.topic for batch in cp.checkpoint.pending.values() for p in batch] == ["sums"]
    interval.committed(cp, store.commit(IV, interval.token, cp.checkpoint))
    assert len(store.recover(IV, "").pending) == 1  # durable until Kafka acknowledges it


@pytest.mark.parametrize(("key", "tag"), [("a", "b\x00c"), ("a\x00b", "c"), ("", "t"), ("k\u00e9", "")])
def test_timer_fields_are_unambiguous(key: str, tag: str) -> None:
    entry = TimerEntry(key, tag, 1, TimeDomain.WALL, b"s" * 16)
    assert decode_entry(field_of(key, tag), encode_entry(entry)) == entry
    assert field_of("a", "b\x00c") != field_of("a\x00b", "c")


class Exploder(Probe):
    def process_record(self, ctx: Context, record: Record) -> None:
        if record.value["n"] == 99:
            raise KeyboardInterrupt  # not an Exception: not a dead letter; the worker stops
        ctx.state.set(Tally(record.value["n"]))


class FakeConsumer:
    """The group member as the worker uses it (``transport.consumer.GroupConsumer``)."""

    def __init__(self, chunks: list[list[Message]]) -> None:
        self.chunks = chunks
        self.closed = False

    def subscribe(self, *args: Any) -> None:
        return None

    def poll(self, max_messages: int, timeout: float) -> list[Message]:
        return self.chunks.pop(0) if self.chunks else []

    def assignment(self) -> list[Any]:
        return []

    def commit(self, offsets: Any, asynchronous: bool = True) -> bool:
        return True

    def committed(self, parts: Any, timeout: float = 0) -> list[Any]:
        return []  # no witness yet

    def close(self) -> None:
        self.closed = True


def test_an_error_mid_batch_commits_nothing() -> None:
    from mwcore.runtime.runner import Runner
    from mwcore.runtime.worker import Worker
    from mwcore.watermarks.source import FixedWatermark

    registry = SchemaRegistry.from_directory(SCHEMAS)
    store = MemoryCheckpointStore()
    worker = Worker(
        Exploder(), WorkerConfig(bootstrap="127.0.0.1:9"), store, registry, FixedWatermark(), core=PY
    )
    consumer = FakeConsumer([[msg(registry, 0, 1), msg(registry, 1, 99), msg(registry, 2, 3)]])
    worker.consumer = consumer  # type: ignore[assignment]
    worker.acquire(0)
    iv = IntervalId("default", "probe", 0)
    with pytest.raises(KeyboardInterrupt):
        Runner([worker]).run()
    # The batch moved positions past a record that never ran: committing it would lose it.
    assert store.recover(iv, "").positions == {} and store.recover(iv, "").commits == 0
    assert consumer.closed


class LogConsumer(FakeConsumer):
    """A partition's log, served from the consumer's position: ``seek`` re-reads it."""

    def __init__(self, log: list[Message], per_poll: int) -> None:
        super().__init__([])
        self.log, self.per_poll, self.at, self.paused = log, per_poll, 0, False

    def poll(self, max_messages: int, timeout: float) -> list[Message]:
        if self.paused:
            return []
        out = self.log[self.at : self.at + self.per_poll]
        self.at += len(out)
        return out

    def assignment(self) -> list[Any]:
        from mwcore.transport.consumer import Part

        return [Part("numbers", 0)]

    def pause(self, parts: Any) -> None:
        self.paused = True

    def resume(self, parts: Any) -> None:
        self.paused = False

    def seek(self, part: Any, offset: int) -> None:
        self.at = max(0, offset)  # BEGINNING is negative

    def end_offset(self, part: Any, cached: bool = False) -> int:
        return len(self.log)

    def position(self, part: Any) -> int:
        return self.at


@pytest.mark.parametrize("careful_s", [0.0, 30.0])
def test_a_batch_that_cannot_be_undone_is_redone_carefully_and_commits_the_same(careful_s: float) -> None:
    """Record 13 fails after record 100 changed the key in the same batch (in place):
    the worker drops the batch, takes the interval back from its checkpoint and redoes
    it with each call's state encoded at once: 13 is dead-lettered and undone, the rest
    committed exactly once. Careful mode lasts ``careful_s`` past the redone batch: the
    second 13 is redone again (0 s) or taken carefully (30 s), with the same result."""
    from mwcore.runtime.worker import Worker
    from mwcore.watermarks.source import FixedWatermark

    registry = SchemaRegistry.from_directory(SCHEMAS)
    store = MemoryCheckpointStore()
    config = WorkerConfig(bootstrap="127.0.0.1:9")
    worker = Worker(
        Probe(), config, store, registry, FixedWatermark(), core=PY, tuning=Tuning(careful_s=careful_s)
    )
    log = [msg(registry, i, n) for i, n in enumerate([1, 100, 13, 2, 3, 13])]
    worker.consumer = worker.ownership.consumer = LogConsumer(log, per_poll=3)  # type: ignore[assignment]
    worker.acquire(0)
    iv = IntervalId("default", "probe", 0)
    worker.step()  # 1, 100, 13: redo
    assert worker.counters.redone == 1 and store.recover(iv, "").commits == 0
    for _ in range(6):
        worker.step()
        worker.commit(*worker.intervals.values())
    snap = store.recover(iv, "")
    assert snap.positions == {"numbers:0": 6}
    assert store.load_state(iv, [b"k"]) == [b'{"total":106}']  # 1+100+2+3, each once
    assert worker.counters.redone == (2 if careful_s == 0 else 1)
    assert worker.counters.dead_letters == 2


class BytearrayCodec:
    """A user codec that returns a bytearray (the store takes bytes)."""

    def bind(self, registry: SchemaRegistry) -> None:
        return None

    def encode(self, value: Any) -> bytes:
        return bytearray(str(value).encode())  # type: ignore[return-value]

    def decode(self, data: bytes) -> Any:
        return int(data)


class CountWithBytearrays(WeakProbe):
    options = Options()
    state_codec = BytearrayCodec()

    def process_record(self, ctx: Context, record: Record) -> None:
        ctx.state.set((ctx.state.get() or 0) + record.value["n"])


def test_a_codecs_bytearray_is_committed_as_bytes() -> None:
    from mwcore.store.checkpoint_wire import commit_args
    from mwcore.store.fast_script import pack_call

    interval, store, registry = make(CountWithBytearrays())
    interval.process([msg(registry, 0, 3), msg(registry, 1, 4)])
    ready = interval.prepare()
    assert ready is not None and ready.checkpoint.state == {b"k": b"7"}
    pack_call("0" * 40, (), commit_args("t", True, ready.checkpoint))  # hiredis takes only bytes
    interval.committed(ready, store.commit(IV, interval.token, ready.checkpoint))
    assert store.load_state(IV, [b"k"]) == [b"7"]


class WitnessingConsumer(FakeConsumer):
    """A group member whose committed offsets witness 5 checkpoints of every interval."""

    def committed(self, parts: Any, timeout: float = 0) -> list[Any]:
        from mwcore.runtime.witness import encode
        from mwcore.transport.consumer import Offset

        return [Offset(p.topic, p.partition, 10, encode(5)) for p in parts]


@pytest.mark.parametrize("accept", [False, True], ids=["stops", "accepted-by-the-operator"])
def test_a_store_behind_its_witness_stops_the_takeover_unless_the_operator_accepts_it(accept: bool) -> None:
    """The store has no checkpoint of the interval, Kafka witnessed 5: the takeover stops
    with ``StoreRollbackError``, or, with ``MW_ACCEPT_STORE_ROLLBACK`` (the operator's
    choice after such a stop), goes on from what the store has."""
    from mwcore.errors import StoreRollbackError
    from mwcore.runtime.worker import Worker
    from mwcore.watermarks.source import FixedWatermark

    registry = SchemaRegistry.from_directory(SCHEMAS)
    config = WorkerConfig(bootstrap="127.0.0.1:9", accept_store_rollback=accept)
    worker = Worker(Exploder(), config, MemoryCheckpointStore(), registry, FixedWatermark(), core=PY)
    worker.consumer = worker.ownership.consumer = WitnessingConsumer([])  # type: ignore[assignment]
    if accept:
        assert worker.acquire(0).commits == 0
    else:
        with pytest.raises(StoreRollbackError, match="the store has 0 checkpoints but Kafka witnessed 5"):
            worker.acquire(0)
