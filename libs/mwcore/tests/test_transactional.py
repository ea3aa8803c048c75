"""The worker's side of transactional productions (``runtime/transactional.py``), on a
twin of Kafka's transactions: what a crash at each moment leaves a ``read_committed``
reader, what a new owner sends again, and a zombie's fencing. (The proof on a real
broker is ``tests/test_interop_transactions.py``.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from test_failures import PY, SCHEMAS, msg

from mwcore import Computation, Context, Input, Options, Output, Record
from mwcore.api.record import Production
from mwcore.runtime.config import Tuning, WorkerConfig
from mwcore.runtime.worker import Worker
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.memory_store import MemoryCheckpointStore
from mwcore.transport.consumer import Offset, Part
from mwcore.transport.transactions import Outcome, Tally
from mwcore.watermarks.source import FixedWatermark


@dataclass
class Sum:
    total: int = 0


class TxnSum(Computation[Sum]):
    name = "txnsum"
    inputs = (Input("numbers", schema="mw.examples.Number"),)
    outputs = (Output("sums", schema="mw.examples.Sum"),)
    options = Options(productions="transactional")

    def process_record(self, ctx: Context[Sum], record: Record) -> None:
        st: Sum = ctx.state.get() or Sum()
        st.total += record.value["n"]
        ctx.produce("sums", {"key": ctx.key, "total": st.total, "count": 1}, record.timestamp)
        ctx.state.set(st)


class Killed(BaseException):
    """The process dies here (not an ``Exception``: nothing handles it)."""


@dataclass
class FakeKafka:
    """Committed records by production id, the group's offsets, each id's epoch and its
    open transaction."""

    log: list[bytes] = field(default_factory=list)
    offsets: dict[tuple[str, int], tuple[int, str]] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)
    open: dict[str, list[bytes]] = field(default_factory=dict)
    kill_in: str = ""  # "in": before the commit; "after": once committed
    meanwhile: Callable[[], None] | None = None  # runs inside the next transaction (a pause)

    def dupes(self) -> int:
        return len(self.log) - len(set(self.log))


class FakeSender:
    def __init__(self, kafka: FakeKafka, txn_id: str) -> None:
        self.kafka, self.txn_id, self.epoch = kafka, txn_id, -1

    def begin(self, timeout: float = 0) -> None:
        self.kafka.open.pop(self.txn_id, None)  # an earlier owner's open transaction: aborted
        self.epoch = self.kafka.epochs[self.txn_id] = self.kafka.epochs.get(self.txn_id, 0) + 1

    def commit(
        self,
        batches: list[list[Production]],
        offsets: list[tuple[str, int, int, str]],
        group_metadata: bytes | None,
        id_header: str,
        *extra: Any,
        sign: Any = None,
        timeout: float = 0,
        before_commit: Callable[[], None] | None = None,
    ) -> Outcome:
        tallies = [Tally() for _ in batches]
        if self.kafka.epochs[self.txn_id] != self.epoch:
            return Outcome("fenced", tallies, "producer fenced")
        self.kafka.open[self.txn_id] = [p.id for b in batches for p in b]
        if self.kafka.kill_in == "in":
            raise Killed
        pause, self.kafka.meanwhile = self.kafka.meanwhile, None
        if pause is not None:
            pause()
            if self.kafka.epochs[self.txn_id] != self.epoch:  # another producer took the id over
                return Outcome("fenced", tallies, "producer fenced")
        for b, t in zip(batches, tallies, strict=True):
            for p in b:
                t.ends[(p.topic, 0)] = len(self.kafka.log) + 1
                t.counts[(p.topic, 0)] = t.counts.get((p.topic, 0), 0) + 1
                self.kafka.log.append(p.id)
        del self.kafka.open[self.txn_id]
        for topic, part, off, meta in offsets:
            self.kafka.offsets[(topic, part)] = (off, meta)
        if self.kafka.kill_in == "after":
            raise Killed
        return Outcome("committed", tallies)

    def probe(self, production: Production, id_header: str, *extra: Any, timeout: float = 0) -> Any:
        return None

    def close(self, timeout: float = 0) -> None:
        return None


class FakeMember:
    """The group member: serves ``chunks``, and the group's offsets from the twin."""

    def __init__(self, kafka: FakeKafka, chunks: list[list[Any]]) -> None:
        self.kafka, self.chunks = kafka, chunks

    def poll(self, max_messages: int, timeout: float) -> list[Any]:
        return self.chunks.pop(0) if self.chunks else []

    def committed(self, parts: Any, timeout: float = 0) -> list[Offset]:
        got = [(p, self.kafka.offsets.get((p.topic, p.partition))) for p in parts]
        return [Offset(p.topic, p.partition, o[0], o[1]) for p, o in got if o is not None]

    def commit(self, offsets: Any, asynchronous: bool = True) -> bool:  # the plain witness
        for o in offsets:
            self.kafka.offsets[(o.topic, o.partition)] = (o.offset, o.metadata)
        return True

    def group_metadata(self) -> bytes:
        return b"CGMDv2:test"

    def pause(self, parts: Any) -> None:
        return None

    def resume(self, parts: Any) -> None:
        return None

    def seek(self, part: Any, offset: int) -> None:
        return None

    def end_offset(self, part: Part, cached: bool = False, timeout: float = 0) -> int:
        return len(self.kafka.log)

    def assignment(self) -> list[Part]:
        return [Part("numbers", 0)]

    def position(self, part: Part) -> int:
        return 0


@pytest.fixture(params=[False, True], ids=["waited", "overlapped"])
def overlap(request: pytest.FixtureRequest) -> bool:
    """Each test with the transaction waited for, and sent on the pool while the loop
    goes on (``Tuning.overlap_transactions``)."""
    return bool(request.param)


def owner(
    kafka: FakeKafka, store: MemoryCheckpointStore, chunks: list[list[Any]], overlap: bool, **cfg: Any
) -> tuple[Worker, Any]:
    """A worker that owns interval 0, its producers made on the twin."""
    registry = SchemaRegistry.from_directory(SCHEMAS)
    worker = Worker(
        TxnSum(),
        WorkerConfig(bootstrap="127.0.0.1:9", **cfg),
        store,
        registry,
        FixedWatermark(),
        core=PY,
        tuning=Tuning(overlap_transactions=overlap),
    )
    assert worker.transactions is not None
    worker.transactions._make = lambda txn_id: FakeSender(kafka, txn_id)  # type: ignore[method-assign]
    member = FakeMember(kafka, chunks)
    worker.consumer = worker.ownership.consumer = member  # type: ignore[assignment]
    worker.acquire(0)
    return worker, member


def records(registry_offsets: range) -> list[Any]:
    registry = SchemaRegistry.from_directory(SCHEMAS)
    return [msg(registry, i, i + 1) for i in registry_offsets]


def settle(worker: Worker) -> None:
    """The commit turn taken, and the transactions it sent."""
    worker.settle()
    if worker.transactions is not None and worker.transactions.overlapping:
        worker.transacted(10)


def run(worker: Worker, turns: int = 5) -> None:
    for _ in range(turns):
        worker.step()
        worker.commit(*worker.intervals.values())
        settle(worker)


def test_each_checkpoints_batch_goes_out_once_with_its_witness(overlap: bool) -> None:
    kafka, store = FakeKafka(), MemoryCheckpointStore()
    worker, _ = owner(kafka, store, [records(range(0, 5)), records(range(5, 9))], overlap)
    run(worker)
    assert len(kafka.log) == 9 and kafka.dupes() == 0
    interval = worker.intervals[0]
    ((offset, meta),) = kafka.offsets.values()
    assert (offset, meta) == (9, f"mw:{interval.commits}t")  # the last checkpoint's, by a transaction
    assert worker.transactions is not None and worker.transactions.committed >= 2


@pytest.mark.parametrize("kill_in", ["in", "after"], ids=["inside-the-transaction", "just-after-it"])
def test_a_new_owner_sends_again_exactly_what_did_not_reach_kafka(kill_in: str, overlap: bool) -> None:
    """Killed inside the transaction: nothing of it is visible, the next owner sends the
    checkpointed batch again. Killed just after it committed: the witness says so, and
    the next owner sends nothing again. Either way each production is seen once."""
    kafka, store = FakeKafka(), MemoryCheckpointStore()
    worker, _ = owner(kafka, store, [records(range(0, 5))], overlap)
    run(worker)
    first = len(kafka.log)
    kafka.kill_in = kill_in
    worker.consumer.chunks.append(records(range(5, 9)))  # type: ignore[union-attr]
    with pytest.raises(Killed):
        run(worker)
    kafka.kill_in = ""
    assert len(kafka.log) == (first if kill_in == "in" else 9)
    successor, _ = owner(kafka, store, [], overlap)  # takes the id over: the open transaction aborted
    run(successor)
    assert sorted(set(kafka.log)) == sorted(kafka.log) and len(kafka.log) == 9
    assert store.recover(successor.intervals[0].id, "").pending == {}


def test_negative_control_the_witness_outside_the_transaction_gives_a_duplicate(overlap: bool) -> None:
    """The transaction without the offsets, the witness written after it: killed in
    between, the next owner does not know the batch reached Kafka and sends it again."""
    kafka, store = FakeKafka(), MemoryCheckpointStore()
    worker, _ = owner(kafka, store, [records(range(0, 5))], overlap, unsafe={"witness_outside_txn": True})
    kafka.kill_in = "after"
    with pytest.raises(Killed):
        run(worker)
    kafka.kill_in = ""
    successor, _ = owner(kafka, store, [], overlap, unsafe={"witness_outside_txn": True})
    run(successor)
    assert kafka.dupes() == 5


def test_a_zombies_transaction_is_refused_once_another_owner_took_the_id_over(overlap: bool) -> None:
    """Paused inside its transaction (its checkpoint written), the zombie's interval is
    taken over: the new owner's producer takes the id over, sends the batch again and
    goes on. The zombie's commit is then refused by the epoch (not by the store: its
    checkpoint was written before the takeover), and it drops the interval."""
    kafka, store = FakeKafka(), MemoryCheckpointStore()
    zombie, _ = owner(kafka, store, [records(range(0, 3))], overlap)
    taken: list[Worker] = []

    def take_over() -> None:
        successor, member = owner(kafka, store, [], overlap)
        member.chunks.append(records(range(3, 6)))
        run(successor)
        taken.append(successor)

    kafka.meanwhile = take_over
    zombie.step()
    zombie.commit(*zombie.intervals.values())
    settle(zombie)
    assert taken and 0 not in zombie.intervals  # dropped: its transaction was fenced
    assert len(kafka.log) == 6 and kafka.dupes() == 0


def test_a_checkpoint_waits_for_the_transaction_of_the_one_before(overlap: bool) -> None:
    """An aborted transaction is sent again before the interval's next checkpoint."""
    kafka, store = FakeKafka(), MemoryCheckpointStore()
    worker, member = owner(kafka, store, [records(range(0, 3))], overlap)
    assert worker.transactions is not None
    sender = worker.transactions.senders[0]
    real = sender.commit
    calls: list[int] = []

    def flaky(*a: Any, **kw: Any) -> Outcome:
        calls.append(1)
        if len(calls) == 1:
            return Outcome("retry", [Tally() for _ in a[0]], "broker restarting")
        return real(*a, **kw)

    sender.commit = flaky  # type: ignore[method-assign]
    worker.step()
    worker.commit(*worker.intervals.values())
    settle(worker)
    interval = worker.intervals[0]
    commits = interval.commits
    assert interval.outbox.has_unsent and not worker.transactions.ready(interval)
    member.chunks.append(records(range(3, 6)))
    worker.step()
    worker.commit(interval)  # not written: the batch before it is not in Kafka yet
    assert interval.commits == commits
    worker.transactions._retry_at.clear()
    run(worker)
    assert len(kafka.log) == 6 and kafka.dupes() == 0


def held_in_flight(kafka: FakeKafka, store: MemoryCheckpointStore) -> tuple[Worker, Any, threading.Event]:
    """An overlapped owner whose first checkpoint is written and its transaction sent,
    held inside the transaction (on its lane) until the event returned is set."""
    worker, member = owner(kafka, store, [records(range(0, 3))], True)
    go, inside = threading.Event(), threading.Event()

    def held() -> None:
        inside.set()
        assert go.wait(30)

    kafka.meanwhile = held
    worker.step()
    worker.commit(*worker.intervals.values())
    worker.settle()  # the checkpoint is written; its transaction is sent on the lane
    assert inside.wait(10)
    return worker, member, go


def test_the_loop_goes_on_while_a_transaction_is_in_flight_and_the_next_checkpoint_waits() -> None:
    """Overlapped: the transaction runs on its lane while the worker's loop reads and
    processes more; the interval's next checkpoint is written only once the
    transaction before it has ended (else the store would hold batches of two
    checkpoints the witness does not cover)."""
    kafka, store = FakeKafka(), MemoryCheckpointStore()
    worker, member, go = held_in_flight(kafka, store)
    assert worker.transactions is not None and worker.transactions.in_flight
    interval = worker.intervals[0]
    commits = interval.commits
    member.chunks.append(records(range(3, 6)))
    worker.step()  # the loop goes on: reads and processes the next records
    worker.commit(interval)
    assert interval.commits == commits and kafka.log == []  # not written: one is in flight
    go.set()
    run(worker)
    assert len(kafka.log) == 6 and kafka.dupes() == 0
    assert kafka.offsets[("numbers", 0)] == (6, f"mw:{interval.commits}t")


def test_a_transaction_stuck_on_the_broker_does_not_hold_the_interval_going() -> None:
    """A transaction in flight when the broker went away can wait out its round trips'
    timeouts. Dropping its interval (lost, fenced) waits ``CLOSE_WAIT_S`` for it, not
    more, and leaves it to end on its lane; the next owner's producer takes the id over
    (the stuck one is then fenced), and every production is seen once."""
    from mwcore.runtime.transactional import CLOSE_WAIT_S

    kafka, store = FakeKafka(), MemoryCheckpointStore()
    worker, _, go = held_in_flight(kafka, store)
    assert worker.transactions is not None
    flight = worker.transactions._flights[0].outcome
    started = time.monotonic()
    worker.transactions.close(0)  # as when the interval is lost
    assert time.monotonic() - started < CLOSE_WAIT_S + 1
    successor, member = owner(kafka, store, [], True)
    member.chunks.append(records(range(3, 6)))
    run(successor)
    go.set()  # the stuck transaction ends: refused, its producer fenced
    assert flight.result(10).status == "fenced"
    assert len(kafka.log) == 6 and kafka.dupes() == 0


def test_a_lane_runs_its_calls_in_order_and_hands_back_what_they_raised() -> None:
    from mwcore.runtime.lane import Lane

    lane: Lane[int] = Lane("test")
    seen: list[int] = []

    def call(n: int) -> int:
        seen.append(n)
        if n == 2:
            raise ValueError("two")
        return n

    futures = [lane.submit(lambda n=n: call(n)) for n in range(4)]
    assert [f.result(5) for f in (futures[0], futures[1], futures[3])] == [0, 1, 3]
    with pytest.raises(ValueError, match="two"):
        futures[2].result(5)
    assert seen == [0, 1, 2, 3]
    lane.stop()


def test_a_witness_a_strong_owner_wrote_covers_nothing_delivered_so_its_batches_are_sent(
    overlap: bool,
) -> None:
    """Switching a pipeline from strong to transactional productions: the strong
    owner's witness covers productions it released, not ones Kafka has. A
    transactional owner taking over sends them (a reader outside the kit may then
    see those once more: the switch's one cost); settled unsent, they would be lost."""
    from mwcore.runtime.witness import encode
    from mwcore.store.checkpoint import Checkpoint

    kafka, store = FakeKafka(), MemoryCheckpointStore()
    worker, _ = owner(kafka, store, [records(range(0, 4))], overlap)
    interval = worker.intervals[0]
    worker.step()
    prepared = interval.prepare()
    assert prepared is not None
    store.commit(interval.id, interval.token, prepared.checkpoint)  # the strong owner's last checkpoint
    kafka.offsets[("numbers", 0)] = (4, encode(1))  # its witness, written apart: not "t"
    successor, _ = owner(kafka, store, [], overlap)
    run(successor)
    assert len(kafka.log) == 4 and kafka.dupes() == 0
    assert isinstance(prepared.checkpoint, Checkpoint)
