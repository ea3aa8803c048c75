"""SIGTERM drains: the worker commits its batches, waits for Kafka's acknowledgements,
commits their deletion and exits 0; nothing is pending, nothing is lost, and no
interval still names the stopped worker as its owner in Redis.

Negative control: with the drain skipped (``MW_UNSAFE_SKIP_DRAIN``: the worker leaves
at SIGTERM without committing or waiting), the same check finds pending batches left
behind by the stop.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from testbed.procs import joined, wait_until
from testbed.wire import source_writer
from tests.support.running_sum import PARTITIONS, Deployment, Injector, make_inputs, verify

pytestmark = pytest.mark.exactly_once


def check_clean_stop(returncode: int, logs: str, pending: int, owners: list[str]) -> list[str]:
    """What a SIGTERM left undone: a non-zero exit, no "stopped", pending batches, an
    interval whose recorded owner is still the stopped worker."""
    problems = [f"interval {i} still names {o} as its owner" for i, o in enumerate(owners) if o]
    if returncode != 0:
        problems.append(f"the worker exited {returncode} on SIGTERM")
    if '"stopped"' not in logs:
        problems.append("the worker did not log that it stopped")
    if pending:
        problems.append(f"{pending} pending batches left behind by a clean stop")
    return problems


def stop_under_load(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, **env: str
) -> list[str]:
    """SIGTERM to a worker while records keep coming; then a new worker finishes the
    stream. Returns what ``check_clean_stop`` and ``verify`` find."""
    inputs = make_inputs(20_000, 100, dup_rate=0.0, seed=21)
    dep = Deployment.on(stack, namespace, tmp_path, worker_env=dict(env))
    worker = dep.add_worker("w0").start()
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    # The first half at 4,000 records/s, then a trickle of 500/s until released: the
    # stop comes while batches are being committed and sent.
    injector = Injector(writer, inputs, rate=4_000, hold_at=len(inputs) // 2, trickle=500)
    injector.start()
    try:
        wait_until(
            lambda: min(dep.commits()) >= 2 and injector.written > injector.hold_at,
            90,
            what="two checkpoints per interval, with the input still coming",
        )
        returncode = worker.terminate()
        pending = sum(int(dep.r.hlen(dep.key(p, "pending"))) for p in range(PARTITIONS))
        owners = [(dep.r.hget(dep.key(p, "meta"), "owner") or b"").decode() for p in range(PARTITIONS)]
        problems = check_clean_stop(returncode, worker.logs(), pending, owners)

        worker.start()
        injector.release.set()
        joined(injector, 120, "the injector")
        dep.wait_caught_up(writer.end_offsets, timeout=120)
    finally:
        injector.release.set()
        worker.terminate()
    return problems + verify(inputs, registry, dep)


def test_sigterm_commits_and_drains_before_exit(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    problems = stop_under_load(stack, registry, namespace, tmp_path)
    assert problems == [], "\n".join(problems)


@pytest.mark.negative_control
def test_negative_control_without_the_drain_batches_are_left_pending(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same stop and check, the drain skipped: the batches committed but not yet
    acknowledged and deleted stay pending (the next owner re-sends them)."""
    problems = stop_under_load(stack, registry, namespace, tmp_path, MW_UNSAFE_SKIP_DRAIN="1")
    print("negative control found:", *problems, sep="\n  ")
    assert any("pending batches left behind" in p for p in problems), problems
