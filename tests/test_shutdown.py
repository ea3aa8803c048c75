"""SIGTERM drains: the worker commits its batches, waits for Kafka's acknowledgements,
commits their deletion and exits 0; nothing is pending and nothing is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from mwcore.localstack import LocalStack
from mwcore.serde import SchemaRegistry
from mwcore.source import SourceWriter
from tests.conftest import ROOT
from tests.support.procs import wait_until
from tests.support.running_sum import PARTITIONS, Deployment, Injector, make_inputs, verify


@pytest.mark.exactly_once
def test_sigterm_commits_and_drains_before_exit(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    inputs = make_inputs(20_000, 100, dup_rate=0.0, seed=21)
    dep = Deployment(stack.bootstrap, stack.redis_url, namespace, ROOT / "schemas", tmp_path)
    worker = dep.add_worker("w0").start()
    writer = SourceWriter(stack.bootstrap, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=4_000)
    injector.start()
    wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")

    assert worker.terminate() == 0
    assert '"stopped"' in worker.logs()
    pending = sum(int(dep.r.hlen(dep.key(p, "pending"))) for p in range(PARTITIONS))
    assert pending == 0, f"{pending} pending batches left behind by a clean stop"

    worker.start()
    injector.join(60)
    assert injector.error is None
    dep.wait_caught_up(writer.end_offsets, timeout=120)
    worker.terminate()
    assert verify(inputs, registry, dep) == []
