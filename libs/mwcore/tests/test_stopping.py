"""A revocation (``runtime/stopping.py``) leaves nothing in its Kafka client: what its
drain could not get acknowledged in time is purged, not retried after the next owner
took over (the next owner re-sends it from the checkpoint). The worker's loop on the
in-memory store; the broker unreachable, so its productions stay unacknowledged."""

from __future__ import annotations

from test_failures import FakeConsumer
from test_interval import message, registry

from mwcore.cores import core
from mwcore.examples.running_sum import RunningSum
from mwcore.runtime import stopping
from mwcore.runtime.config import Tuning, WorkerConfig
from mwcore.runtime.worker import Worker
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.interface import IntervalId
from mwcore.store.memory_store import MemoryCheckpointStore
from mwcore.watermarks.source import FixedWatermark

__all__ = ["registry"]  # test_interval's fixture, used here


def test_a_revocation_purges_what_its_drain_left_unacknowledged(registry: SchemaRegistry) -> None:
    store = MemoryCheckpointStore()
    config = WorkerConfig(bootstrap="127.0.0.1:9", max_batch_delay_ms=0, witness_gate=False)
    tuning = Tuning(overlap_commits=False)
    worker = Worker(
        RunningSum(), config, store, registry, FixedWatermark(), core=core("python"), tuning=tuning
    )
    msgs = [message(registry, i, "k", i + 1, bytes([i + 1]) * 16) for i in range(3)]
    worker.consumer = FakeConsumer([msgs])  # type: ignore[assignment]
    worker.acquire(0)
    worker.step()  # committed, its productions sent: nobody acknowledges them
    assert worker.counters.commits == 1 and worker.sender.flush(0) == 3
    took = stopping.revoked(worker, list(worker.intervals.values()))
    assert took["purged"] == 3
    assert worker.sender.flush(0) == 0  # nothing left to be sent later
    pending = store.recover(IntervalId("default", "running_sum", 0), "").pending
    assert len(pending) == 1  # the batch, for the next owner to send
