"""Crash tests (semantics I-1 to I-4): SIGKILL workers often, also at fault points.

After the storm every key's sum equals the ground truth, every production id was
produced, none is extra, and a production id never carries two different values.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from mwcore.localstack import LocalStack
from mwcore.serde import SchemaRegistry
from mwcore.source import SourceWriter
from tests.conftest import ROOT
from tests.support.procs import wait_until
from tests.support.running_sum import Deployment, Injector, make_inputs, verify

# Per-event probabilities: one fault point armed per worker start.
FAULT_POINTS = {
    "mid_batch": 0.05,
    "after_commit": 0.05,
    "after_produce": 0.02,  # per loop turn with acknowledged, undeleted batches
    "in_timer": 0.003,
}


def _deploy(stack: LocalStack, namespace: str, tmp_path: Path, **env: str) -> Deployment:
    return Deployment(stack.bootstrap, stack.redis_url, namespace, ROOT / "schemas", tmp_path, worker_env=env)


@pytest.mark.exactly_once
@pytest.mark.slow
def test_crash_storm_keeps_exactly_once(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    inputs = make_inputs(200_000, 1_000, dup_rate=0.01, seed=7)
    dep = _deploy(stack, namespace, tmp_path)
    fault_log = tmp_path / "faults.jsonl"
    workers = [dep.add_worker("w0"), dep.add_worker("w1")]
    for w in workers:
        w.start()
    writer = SourceWriter(stack.bootstrap, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=5_000, hold_at=int(len(inputs) * 0.8))
    injector.start()

    # Recovery must resume a checkpoint, not start over: two commits per interval first.
    wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")

    rng = random.Random(11)
    points = list(FAULT_POINTS)
    external = 0
    next_point = 0

    def arm(w: object) -> None:
        nonlocal next_point
        point = points[next_point % len(points)]
        next_point += 1
        w.start(MW_FAULTS=f"{point}:kill:{FAULT_POINTS[point]}", MW_FAULT_LOG=str(fault_log))  # type: ignore[attr-defined]

    for w in workers:  # the first two kills: from outside, at an arbitrary moment
        w.kill()
        external += 1
        arm(w)
    deadline = time.monotonic() + 300
    next_outside = time.monotonic() + rng.uniform(5, 15)
    while time.monotonic() < deadline:
        fired = _fired(fault_log)
        if external + sum(fired.values()) >= 12 and all(fired.get(p, 0) >= 2 for p in points):
            break
        for w in workers:
            if not w.alive:
                arm(w)
        if time.monotonic() >= next_outside and external < 6:
            # Now and then an outside SIGKILL, at a random moment of a working worker.
            victim = rng.choice([w for w in workers if w.ready] or workers)
            victim.kill()
            external += 1
            arm(victim)
            next_outside = time.monotonic() + rng.uniform(5, 15)
        time.sleep(0.1)
    fired = _fired(fault_log)
    assert all(fired.get(p, 0) >= 1 for p in points), f"fault points that never fired: {fired}"
    kills = external + sum(fired.values())
    assert kills >= 10, f"only {kills} SIGKILLs"

    injector.release.set()
    injector.join(120)
    assert injector.error is None, injector.error
    for w in workers:  # finish unarmed
        w.kill()
        w.start()
    dep.wait_caught_up(writer.end_offsets, timeout=180)
    for w in workers:
        w.terminate()

    problems = verify(inputs, registry, dep)
    print(f"kills: {kills} ({external} from outside, fault points {fired})")
    assert problems == [], "\n".join(problems)


@pytest.mark.exactly_once
def test_negative_control_without_dedup_reports_duplicates(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same check, record-id dedup turned off: the re-sent inputs are counted twice."""
    inputs = make_inputs(20_000, 200, dup_rate=0.01, seed=3)
    dep = _deploy(stack, namespace, tmp_path, MW_UNSAFE_DISABLE_DEDUP="1")
    worker = dep.add_worker("w0").start()
    writer = SourceWriter(stack.bootstrap, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=20_000)
    injector.start()
    wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
    worker.kill()
    worker.start()
    injector.join(60)
    dep.wait_caught_up(writer.end_offsets, timeout=120)
    worker.terminate()
    problems = verify(inputs, registry, dep)
    print("negative control found:", problems)
    # A re-sent input is applied again: its production id repeats with a new value
    # and its key's sums run past the truth.
    assert any("different values" in p for p in problems), problems
    assert any("not exactly 1..n" in p for p in problems), problems


@pytest.mark.exactly_once
def test_weak_productions_survive_crashes(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """Weak productions go out before the checkpoint; crashes re-send them with the same
    ids and values (the computation is deterministic), so consumers still see each once."""
    inputs = make_inputs(30_000, 300, dup_rate=0.01, seed=13)
    dep = _deploy(stack, namespace, tmp_path, computation="tests.support.computations:WeakRunningSum")
    fault_log = tmp_path / "faults.jsonl"
    workers = [dep.add_worker("w0").start(), dep.add_worker("w1").start()]
    writer = SourceWriter(stack.bootstrap, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=2_000, hold_at=len(inputs) // 2)
    injector.start()
    wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
    for i, point in enumerate(["mid_batch", "after_commit", "before_commit"]):
        w = workers[i % 2]
        w.kill()
        w.start(MW_FAULTS=f"{point}:kill:0.05", MW_FAULT_LOG=str(fault_log))
        wait_until(lambda w=w: not w.alive, 60, what=f"a kill at {point}")
        w.start()
    injector.release.set()
    injector.join(120)
    assert injector.error is None, injector.error
    dep.wait_caught_up(writer.end_offsets, timeout=120)
    for w in workers:
        w.terminate()
    assert len(_fired(fault_log)) == 3
    assert verify(inputs, registry, dep) == []


def _fired(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            point = json.loads(line)["point"]
            counts[point] = counts.get(point, 0) + 1
    return counts
