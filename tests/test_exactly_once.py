"""Crash tests (semantics I-1 to I-4): SIGKILL workers often, also at fault points.

The storm goes on until workers were SIGKILLed at least twelve times, from outside
and at every fault point; it fails if that takes more than five minutes. After the
storm every key's sum equals the ground truth, every production id was
produced, none is extra, and a production id never carries two different values.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.kafka_broker import KafkaBroker
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import end_offsets, partition_counts, topic_name
from testbed.procs import joined, wait_until
from testbed.wire import source_writer
from tests.support.running_sum import Deployment, Injector, fired_points, make_inputs, verify

KILLS = 12  # the storm goes on until this many SIGKILLs, each fault point among them
STORM_S = 300  # and fails if that takes longer

# Per-event probabilities: one fault point armed per worker start.
FAULT_POINTS = {
    "mid_batch": 0.05,
    "after_commit": 0.05,
    "after_produce": 0.02,  # per loop turn with acknowledged, undeleted batches
    "in_timer": 0.003,
}


def _deploy(stack: LocalStack, namespace: str, tmp_path: Path, **env: str) -> Deployment:
    return Deployment.on(stack, namespace, tmp_path, worker_env=env)


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
    try:
        writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
        injector = Injector(writer, inputs, rate=5_000, hold_at=int(len(inputs) * 0.8))
        injector.start()

        # Recovery must resume a checkpoint, not start over: two commits per interval first.
        wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")

        rng = random.Random(11)
        points = list(FAULT_POINTS)
        next_point = 0

        def arm(w: object) -> None:
            nonlocal next_point
            point = points[next_point % len(points)]
            next_point += 1
            w.start(MW_FAULTS=f"{point}:kill:{FAULT_POINTS[point]}", MW_FAULT_LOG=str(fault_log))  # type: ignore[attr-defined]

        for w in workers:  # the first two kills: from outside, at an arbitrary moment
            w.kill()
            arm(w)
        deadline = time.monotonic() + STORM_S
        next_outside = time.monotonic() + rng.uniform(5, 15)
        while True:
            fired = fired_points(fault_log)
            external = sum(w.kills for w in workers)  # SIGKILLs of a live worker from outside
            kills = external + sum(fired.values())
            if kills >= KILLS and all(fired.get(p, 0) >= 1 for p in points):
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the storm ran out of time ({STORM_S}s) at {kills} SIGKILLs ({external} from outside, "
                    f"fault points {fired}); it needs {KILLS}, each fault point at least once"
                )
            assert injector.error is None, injector.error
            for w in workers:
                if not w.alive:
                    arm(w)
            if time.monotonic() >= next_outside and external < 6:
                # Now and then an outside SIGKILL, at a random moment of a working worker.
                victim = rng.choice([w for w in workers if w.ready] or workers)
                victim.kill()
                arm(victim)
                next_outside = time.monotonic() + rng.uniform(5, 15)
            time.sleep(0.1)

        injector.release.set()
        joined(injector, 120, "the injector")
        for w in workers:  # finish unarmed
            w.kill()
            w.start()
        dep.wait_caught_up(writer.end_offsets, timeout=180)
    finally:
        for w in workers:  # also when the storm fails
            w.terminate()

    problems = verify(inputs, registry, dep)
    print(f"kills: {kills} ({external} from outside, fault points {fired})")
    assert problems == [], "\n".join(problems)


@pytest.mark.exactly_once
@pytest.mark.negative_control
def test_negative_control_without_dedup_reports_duplicates(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same check, record-id dedup turned off: the re-sent inputs are counted twice."""
    inputs = make_inputs(20_000, 200, dup_rate=0.01, seed=3)
    dep = _deploy(stack, namespace, tmp_path, MW_UNSAFE_DISABLE_DEDUP="1")
    worker = dep.add_worker("w0").start()
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=20_000)
    injector.start()
    wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
    worker.kill()
    worker.start()
    joined(injector, 60, "the injector")
    dep.wait_caught_up(writer.end_offsets, timeout=120)
    worker.terminate()
    problems = verify(inputs, registry, dep)
    print("negative control found:", problems)
    # A re-sent input is applied again: its production id repeats with a new value
    # and its key's sums run past the truth.
    assert any("different values" in p for p in problems), problems
    assert any("not exactly 1..n" in p for p in problems), problems


# Where the weak-production run kills a worker, in order (a weak batch is never at
# "before_commit": that point is for checkpointed productions).
WEAK_KILLS = ["mid_batch", "after_commit", "after_produce"]


@pytest.fixture(scope="module")
def authorizing_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack whose broker has an authorizer (everyone may do anything no ACL speaks
    of), so that a test can make it refuse writes to one topic for a while."""
    broker = KafkaBroker(
        extra={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        }
    )
    with LocalStack(workdir=tmp_path_factory.mktemp("authorizing"), broker=broker) as s:
        yield s


def _refuse_writes(bootstrap: str, topic: str, refuse: bool) -> None:
    """While ``refuse``: an ACL denies writes to ``topic``, so the broker refuses every
    production to it (TOPIC_AUTHORIZATION_FAILED, a refusal an operator lifts: each is
    sent again and again) and lets everything else through; then no ACL again. (A refusal
    for good, such as a timestamp out of range, makes a dead letter of the record.)"""
    anyone = ("User:ANONYMOUS", "*")
    acls = [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, *anyone, op, kind)
        for op, kind in (
            (AclOperation.ALL, AclPermissionType.ALLOW),
            (AclOperation.WRITE, AclPermissionType.DENY),
        )
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the futures are done
    filters = [
        AclBindingFilter(
            *(a.restype, a.name, a.resource_pattern_type), *anyone, a.operation, a.permission_type
        )
        for a in acls
    ]
    done = admin.create_acls(acls) if refuse else admin.delete_acls(filters)
    for fut in done.values():
        fut.result(timeout=30)


def _stalled(bootstrap: str, topic: str) -> bool:
    """No record was added to ``topic`` for half a second (while it is written to)."""
    topics = partition_counts(bootstrap, [topic])
    first = end_offsets(bootstrap, topics)
    time.sleep(0.5)
    return end_offsets(bootstrap, topics) == first


def run_weak(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, **env: str
) -> list[str]:
    """``WeakRunningSum`` on two workers under a steady 2,000 records/s: one SIGKILL at
    each fault point of WEAK_KILLS, then one while ``sums`` refuses writes (so the
    killed worker's weak productions of those seconds are all unacknowledged, its
    commits go on). Returns what ``verify`` finds."""
    inputs = make_inputs(200_000, 300, dup_rate=0.01, seed=13)
    dep = Deployment.on(
        stack,
        namespace,
        tmp_path,
        worker_env=dict(env),
        computation="tests.support.computations:WeakRunningSum",
    )
    fault_log = tmp_path / "faults.jsonl"
    workers = [dep.add_worker("w0").start(), dep.add_worker("w1").start()]
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    # Until released, the input keeps coming at 2,000 records/s (for over a minute), so
    # every kill finds batches being built, committed and sent.
    injector = Injector(writer, inputs, rate=2_000, hold_at=10_000, trickle=2_000)
    injector.start()
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
        for i, point in enumerate(WEAK_KILLS):
            w = workers[i % 2]
            w.kill()
            w.start(MW_FAULTS=f"{point}:kill:0.05", MW_FAULT_LOG=str(fault_log))
            wait_until(lambda w=w: not w.alive, 60, what=f"a kill at {point}")
            w.start()

        sums = topic_name(namespace, "sums")
        wait_until(lambda: all(w.ready for w in workers), 60, what="both workers to hold intervals")
        _refuse_writes(stack.bootstrap, sums, True)
        try:
            wait_until(
                lambda: _stalled(stack.bootstrap, sums), 30, what="the broker to refuse writes to sums"
            )
            before = dep.commits()
            wait_until(
                lambda: min(c - b for c, b in zip(dep.commits(), before, strict=True)) >= 5,
                60,
                what="five commits per interval while sums refuses writes",
            )
            workers[0].kill()
        finally:
            _refuse_writes(stack.bootstrap, sums, False)
        workers[0].start()

        assert injector.written < len(inputs), "the input ran out before the kills were done"
        injector.release.set()
        joined(injector, 120, "the injector")
        dep.wait_caught_up(writer.end_offsets, timeout=180)
    finally:
        injector.release.set()
        for w in workers:
            w.terminate()
    fired = [json.loads(line)["point"] for line in fault_log.read_text().splitlines()]
    assert fired == WEAK_KILLS, fired
    return verify(inputs, registry, dep)


@pytest.mark.exactly_once
def test_weak_productions_survive_crashes(
    authorizing_stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """Weak productions go out before the checkpoint; crashes re-send them with the same
    ids and values (the computation is deterministic), and those not acknowledged by a
    commit are in it, so consumers see each exactly once."""
    problems = run_weak(authorizing_stack, registry, namespace, tmp_path)
    assert problems == [], "\n".join(problems)


@pytest.mark.exactly_once
@pytest.mark.negative_control
def test_negative_control_unchecked_weak_productions_are_lost(
    authorizing_stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same run and check, weak productions left out of the checkpoint: the worker
    killed while ``sums`` refused writes loses what it had not got acknowledged (the
    commits have moved its input positions past them)."""
    problems = run_weak(authorizing_stack, registry, namespace, tmp_path, MW_UNSAFE_UNCHECKED_WEAK="1")
    print("negative control found:", *problems, sep="\n  ")
    assert any("productions lost" in p for p in problems), problems
