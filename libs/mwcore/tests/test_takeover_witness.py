"""A witness ahead of the store because the interval moved on while a slow worker took
it over is no store rollback (``runtime/ownership.py``); the store that stays behind is
(``test_failures.py::test_a_store_behind_its_witness_stops_the_takeover_unless_the_operator_accepts_it``,
this test's negative control)."""

from __future__ import annotations

from typing import Any

import pytest
from test_failures import PY, SCHEMAS, Exploder, WitnessingConsumer

from mwcore.runtime.config import WorkerConfig
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.interface import IntervalId
from mwcore.store.memory_store import MemoryCheckpointStore


class OvertakingConsumer(WitnessingConsumer):
    """While the worker reads the witness, another owner takes the interval over and
    commits 5 checkpoints (a taking over slowed by a link to Redis outlasted the
    worker's membership): the witness says 5, and so does the store by then."""

    def __init__(self, store: MemoryCheckpointStore, interval: Any) -> None:
        super().__init__([])
        self.store, self.interval = store, interval

    def committed(self, parts: Any, timeout: float = 0) -> list[Any]:
        from mwcore.store.checkpoint import Checkpoint

        token = self.store.grant(self.interval, "the-next-owner")
        for n in range(5):
            self.store.commit(self.interval, token, Checkpoint(commit_id=f"c{n}"))
        return super().committed(parts, timeout)


def test_a_witness_ahead_because_the_interval_moved_on_is_no_rollback_and_the_old_token_is_fenced() -> None:
    """Read before the witness, the store had 0; read again after it, 5, as Kafka
    witnessed: nothing was lost (the negative control is the test above: a store that
    stays behind still stops the takeover). The worker's token is stale: fenced."""
    from mwcore.errors import FencedError
    from mwcore.runtime.worker import Worker
    from mwcore.store.checkpoint import Checkpoint
    from mwcore.watermarks.source import FixedWatermark

    registry = SchemaRegistry.from_directory(SCHEMAS)
    store = MemoryCheckpointStore()
    worker = Worker(
        Exploder(), WorkerConfig(bootstrap="127.0.0.1:9"), store, registry, FixedWatermark(), core=PY
    )
    interval_id = IntervalId(worker.cfg.namespace, Exploder.name, 0)
    worker.consumer = worker.ownership.consumer = OvertakingConsumer(store, interval_id)  # type: ignore[assignment]
    interval = worker.acquire(0)
    assert interval.commits == 0
    with pytest.raises(FencedError):
        store.commit(interval_id, interval.token, Checkpoint(commit_id="zombie"))
