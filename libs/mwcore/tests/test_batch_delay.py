"""How long a batch stays open: ``MW_MAX_BATCH_DELAY_MS`` while the worker is behind (its
last poll came back full), ``MW_CAUGHT_UP_BATCH_DELAY_MS`` once a poll took all there was.
The worker's loop on the in-memory store, its input a scripted consumer."""

from __future__ import annotations

import pytest
from test_failures import FakeConsumer
from test_interval import message, registry

from mwcore.examples.running_sum import RunningSum
from mwcore.runtime.config import WorkerConfig
from mwcore.runtime.worker import Worker
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.memory_store import MemoryCheckpointStore
from mwcore.watermarks.source import FixedWatermark

__all__ = ["registry"]  # test_interval's fixture, used here


def _worker(registry: SchemaRegistry, caught_up_ms: int) -> Worker:
    config = WorkerConfig(
        bootstrap="127.0.0.1:9",
        poll_records=3,
        max_batch_records=100,
        max_batch_delay_ms=60_000,
        caught_up_batch_delay_ms=caught_up_ms,
        witness_gate=False,
        overlap_commits=False,
    )
    worker = Worker(RunningSum(), config, MemoryCheckpointStore(), registry, FixedWatermark())
    msgs = [message(registry, i, "k", i + 1, bytes([i + 1]) * 16) for i in range(4)]
    worker.consumer = FakeConsumer([msgs[:3], msgs[3:]])  # type: ignore[assignment]
    worker.acquire(0)
    return worker


@pytest.mark.parametrize(("caught_up_ms", "commits_once_caught_up"), [(0, 1), (60_000, 0)])
def test_a_batch_commits_sooner_once_the_worker_has_caught_up(
    registry: SchemaRegistry, caught_up_ms: int, commits_once_caught_up: int
) -> None:
    """A full poll (behind): the batch waits for the long delay. A poll with fewer
    records than asked for (caught up): it commits after the short one. With the short
    delay as long as the other (the second case), nothing commits: the test catches a
    worker that ignores whether it caught up."""
    worker = _worker(registry, caught_up_ms)
    worker.step()  # three records, the poll full: behind
    assert worker.counters.commits == 0
    worker.step()  # one record: caught up
    assert worker.counters.commits == commits_once_caught_up
    assert worker.intervals[0].cache.get("k").total == 10
