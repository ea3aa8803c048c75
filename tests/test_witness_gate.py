"""The commit witness gate (``MW_WITNESS_GATE``, on by default; semantics I-10).

A checkpoint's productions, and watermark reports of its state, wait until Kafka holds
its commit witness (``runtime/witness.py``): so whatever the world has seen of a
checkpoint, the witness proves it was committed, and a store that later loses
checkpoints the witness does not know of only loses checkpoints nothing came from.

The test runs one worker in this process on the real broker and Redis and holds its
witness writes back (as a slow group coordinator would): its checkpoints commit, but
with the gate none of their productions reaches the output topic and no report shows
their positions; once the writes go through, every production is sent. Negative
control: with the gate off, productions and reports of the same unwitnessed
checkpoints go out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from mwcore.examples.running_sum import RunningSum
from mwcore.process.settings import WorkerSettings
from mwcore.process.wiring import build_workers
from mwcore.runtime.worker import Worker
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.consumer import Offset
from mwcore.transport.topics import ensure_topics, topic_name
from mwcore.watermarks.report_format import Report, decode_entry, report_stream
from testbed.topics import read_topic
from testbed.wire import source_writer

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
RECORDS = 400

pytestmark = pytest.mark.exactly_once


@dataclass
class GateOutcome:
    committed_records: int  # input records in checkpoints while the witness was held
    sent_unwitnessed: int  # productions on the output topic while it was held
    reported_unwitnessed: int  # reports showing positions of those checkpoints
    sent_after_release: int  # distinct production ids once the witness went through


class HeldWitness:
    """Wraps a worker's offset commits: while ``holding``, asynchronous ones (the
    witness writes) are kept back, never answered; ``release`` lets them through."""

    def __init__(self, worker: Worker) -> None:
        assert worker.consumer is not None
        self.witness = worker.witness
        self.real: Callable[[Sequence[Offset], bool], bool] = worker.consumer.commit
        self.holding = True
        self.held = 0
        worker.consumer.commit = self.commit  # type: ignore[method-assign]

    def commit(self, offsets: Sequence[Offset], asynchronous: bool = True) -> bool:
        if self.holding and asynchronous:
            self.held += 1
            return True
        return self.real(offsets, asynchronous)

    def release(self) -> None:
        """Let writes through; the one in flight is answered as failed (written again)."""
        self.holding = False
        self.witness.on_committed([])


def _step_until(worker: Worker, done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        worker.step()


def _gate_scenario(stack: LocalStack, registry: SchemaRegistry, namespace: str, gate: bool) -> GateOutcome:
    settings = WorkerSettings.load(
        bootstrap=stack.bootstrap,
        redis_url=stack.redis_url,
        schemas_dir=ROOT / "schemas",
        namespace=namespace,
        witness_gate=gate,
        report_interval_ms=20,
    )
    [worker] = build_workers(RunningSum, settings)
    r = redis_client(stack.redis_url)
    sums = topic_name(namespace, "sums")
    numbers = topic_name(namespace, "numbers")
    ensure_topics(stack.bootstrap, {numbers: PARTITIONS})
    worker.start()
    try:
        _step_until(worker, lambda: len(worker.intervals) == PARTITIONS, 60, "the intervals")
        _step_until(worker, lambda: all(i.is_witnessed() for i in worker.intervals.values()), 30, "takeover")
        held = HeldWitness(worker)
        streams = [report_stream(namespace, "running_sum", i) for i in range(PARTITIONS)]
        marks = [r.xrevrange(stream, count=1) for stream in streams]
        writer = source_writer(stack, registry, numbers, "mw.examples.Number")
        for n in range(RECORDS):
            writer.write(f"k{n % 20}", {"n": 1}, 1_700_000_000_000 + n)
        writer.flush()

        def committed() -> int:
            return sum(
                int(r.hget(f"mw:{{{namespace}/running_sum/{i}}}:pos", f"{numbers}:{i}") or 0)
                for i in range(PARTITIONS)
            )

        _step_until(worker, lambda: committed() >= RECORDS, 60, "every record in a checkpoint")
        deadline = time.monotonic() + 1.0  # a second of sending and reporting, were they free
        while time.monotonic() < deadline:
            worker.step()
        worker.sender.flush(10)
        sent_unwitnessed = len(read_topic(stack.bootstrap, sums))
        reported = 0
        for i in range(PARTITIONS):
            since = marks[i][0][0] if marks[i] else b"0-0"
            for _, fields in r.xrange(streams[i], min=f"({since.decode()}"):
                entry = decode_entry(next(iter(fields.values())))
                if isinstance(entry, Report) and sum(entry.positions.values()) > 0:
                    reported += 1
        assert held.held > 0, "no witness write was held back: the scenario tests nothing"
        held.release()

        def all_sent() -> bool:
            worker.sender.poll(0)
            return len({m.id for m in read_topic(stack.bootstrap, sums)}) >= RECORDS

        _step_until(worker, all_sent, 60, "the productions once witnessed")
        after = len({m.id for m in read_topic(stack.bootstrap, sums)})
        return GateOutcome(committed(), sent_unwitnessed, reported, after)
    finally:
        worker.shutdown()
        r.close()


def test_productions_and_reports_wait_for_the_commit_witness(
    stack: LocalStack, registry: SchemaRegistry, namespace: str
) -> None:
    out = _gate_scenario(stack, registry, namespace, gate=True)
    assert out.committed_records >= RECORDS, out
    assert out.sent_unwitnessed == 0, out  # nothing of a checkpoint Kafka does not witness
    assert out.reported_unwitnessed == 0, out
    assert out.sent_after_release == RECORDS, out  # held, not lost


@pytest.mark.negative_control
def test_negative_control_without_the_gate_productions_precede_their_witness(
    stack: LocalStack, registry: SchemaRegistry, namespace: str
) -> None:
    """The same scenario and checks with ``MW_WITNESS_GATE=0``: the productions and the
    reports of checkpoints the witness does not cover go out."""
    out = _gate_scenario(stack, registry, namespace, gate=False)
    assert out.sent_unwitnessed > 0, out
    assert out.reported_unwitnessed > 0, out
