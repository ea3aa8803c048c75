"""Transactional productions (``productions="transactional"``) for readers outside the kit.

A plain ``read_committed`` consumer (``tests/support/outside.py``), which knows nothing of
the kit's production ids, reads the running sum's output after a storm of SIGKILLs: at
fault points inside the transaction (``in_transaction``: sent with the witness, not yet
committed), just after it (``after_transaction``), between the checkpoint and the
transaction (``after_commit``), before the acknowledged batches' deletion
(``after_produce``) and mid-batch. It must see every production exactly once, and the
kit's own check (``verify``) must pass too.

Negative controls, under the same storm: strong productions (the re-sent copies reach
the outside reader: duplicates), and the witness written outside the transaction
(``MW_UNSAFE_WITNESS_OUTSIDE_TXN``: a kill between the two leaves a batch the witness
does not cover, which the next owner sends again). A zombie paused inside its
transaction is fenced by the next owner's producer epoch: nothing it sent is seen.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.acls import apply, pipeline_acls
from mwcore.transport.topics import topic_name
from testbed.outside import Seen, read_committed
from testbed.procs import ROOT, WorkerProc, joined, wait_until
from testbed.wire import source_writer
from tests.support.running_sum import PARTITIONS, Deployment, Injector, fired_points, make_inputs, verify
from tests.support.secure import Certificates, acl_user_env, client_properties_of, secure_broker

pytestmark = [pytest.mark.interop, pytest.mark.transactions]

TRANSACTIONAL = "tests.support.computations:TransactionalSum"
STRONG = "mwcore.examples.running_sum:RunningSum"
# per pass of the point: the storm kills a worker every few seconds
PROBABILITY = {
    "in_transaction": 0.05,
    "after_transaction": 0.05,
    "after_commit": 0.05,
    "after_produce": 0.02,
    "mid_batch": 0.05,
}
TXN_POINTS = ("in_transaction", "after_transaction", "after_commit", "after_produce", "mid_batch")
STRONG_POINTS = ("after_commit", "after_produce", "mid_batch")  # (no transaction to kill in)
KILLS = 8
STORM_S = 240


def storm(
    stack: LocalStack,
    registry: SchemaRegistry,
    namespace: str,
    tmp_path: Path,
    computation: str,
    points: tuple[str, ...],
    **env: str,
) -> tuple[Seen, list[str], dict[str, int]]:
    """Two workers SIGKILLed at ``points`` in turn until KILLS kills, each point at least
    once; then every record processed. What the outside reader saw of ``sums``, what
    ``verify`` found, and how often each point fired."""
    inputs = make_inputs(40_000, 400, dup_rate=0.0, seed=23)
    dep = Deployment.on(stack, namespace, tmp_path, computation=computation, worker_env=env)
    fault_log = tmp_path / "faults.jsonl"
    workers = [dep.add_worker("w0"), dep.add_worker("w1")]
    for w in workers:
        w.start()
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=1_500, hold_at=int(len(inputs) * 0.9))
    injector.start()
    turn = itertools.cycle(points)

    def arm(w: WorkerProc) -> None:
        point = next(turn)
        w.start(MW_FAULTS=f"{point}:kill:{PROBABILITY[point]}", MW_FAULT_LOG=str(fault_log))

    fired: dict[str, int] = {}
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
        for w in workers:
            w.kill()
            arm(w)
        deadline = time.monotonic() + STORM_S
        while True:
            fired = fired_points(fault_log)
            if sum(fired.values()) >= KILLS and all(fired.get(p, 0) >= 1 for p in points):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the storm ran out of time ({STORM_S} s) with the fault points at {fired}")
            assert injector.error is None, injector.error
            for w in workers:
                if not w.alive:
                    arm(w)
            time.sleep(0.1)
        injector.release.set()
        joined(injector, 120, "the injector")
        for w in workers:  # finish unarmed
            w.kill()
            w.start()
        dep.wait_caught_up(writer.end_offsets, timeout=180)
    finally:
        for w in workers:
            w.terminate()
    print(f"fault points fired: {fired}")
    seen = read_committed(stack.bootstrap, topic_name(namespace, "sums"))
    return seen, verify(inputs, registry, dep), fired


def test_a_read_committed_reader_outside_the_kit_sees_each_production_once_through_kills(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    seen, problems, _ = storm(stack, registry, namespace, tmp_path, TRANSACTIONAL, TXN_POINTS)
    assert problems == [], "\n".join(problems)
    assert seen.duplicates == 0, (seen.records, len(seen.ids), list(seen.where.values())[:10])
    assert seen.records == len(seen.ids) > 0


@pytest.mark.negative_control
def test_negative_control_strong_productions_give_the_outside_reader_duplicates(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """Strong productions under the same storm: right for the kit (``verify``), but what
    a new owner sends again reaches a reader that does not drop ids."""
    seen, problems, _ = storm(stack, registry, namespace, tmp_path, STRONG, STRONG_POINTS)
    assert problems == [], "\n".join(problems)
    print(f"the outside reader saw {seen.duplicates} duplicates in {seen.records} records")
    assert seen.duplicates > 0


@pytest.mark.negative_control
def test_negative_control_the_witness_outside_the_transaction_gives_duplicates(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """Transactions without the witness in them: a kill just after one commits leaves
    its batches in Kafka and the witness behind, and the next owner sends them again."""
    points = ("after_transaction",)
    seen, _, fired = storm(
        stack, registry, namespace, tmp_path, TRANSACTIONAL, points, MW_UNSAFE_WITNESS_OUTSIDE_TXN="1"
    )
    assert fired.get("after_transaction", 0) >= 1, fired
    print(f"the outside reader saw {seen.duplicates} duplicates in {seen.records} records")
    assert seen.duplicates > 0


def test_a_zombie_paused_in_its_transaction_is_fenced_and_nothing_of_it_is_seen(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """A worker stops itself inside a transaction (its batches and witness sent, not
    committed); its session runs out and another worker takes every interval over, whose
    producer's epoch aborts the open transaction. Resumed, the zombie's commit is
    refused (``transaction_fenced``); the outside reader sees every production once."""
    inputs = make_inputs(20_000, 200, dup_rate=0.0, seed=29)
    dep = Deployment.on(stack, namespace, tmp_path, computation=TRANSACTIONAL)
    fault_log = tmp_path / "faults.jsonl"
    zombie = dep.add_worker("a").start(
        MW_FAULTS="in_transaction:stop:1:once:after=30", MW_FAULT_LOG=str(fault_log)
    )
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=2_000)
    injector.start()
    successor = dep.add_worker("b")
    try:
        paused = lambda: fault_log.exists() and bool(fault_log.read_text().strip())  # noqa: E731
        wait_until(paused, 60, what="the zombie to pause")
        successor.start()
        wait_until(
            lambda: successor.logs().count('"interval_acquired"') >= PARTITIONS,
            60,
            what="the successor to take every interval",
        )
        zombie.resume()
        refused = lambda: '"transaction_fenced"' in zombie.logs()  # noqa: E731
        wait_until(refused, 60, what="the zombie's commit to be refused")
        joined(injector, 60, "the injector")
        dep.wait_caught_up(writer.end_offsets, timeout=120)
    finally:
        zombie.terminate()
        successor.terminate()
    seen = read_committed(stack.bootstrap, topic_name(namespace, "sums"))
    problems = verify(inputs, registry, dep)
    assert problems == [], "\n".join(problems)
    assert seen.duplicates == 0


@dataclass
class GuardedStack:
    """A broker with an authorizer (SASL_SSL, nobody may do what no ACL allows) beside the
    session's Redis and registry."""

    certs: Certificates
    sasl_port: int
    redis_url: str
    schema_registry_url: str | None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def env(self, user: str) -> dict[str, str]:
        return acl_user_env(self.certs, user)


@pytest.mark.secure
def test_transactional_productions_on_a_secured_cluster_with_the_kits_acls(
    stack: LocalStack,
    registry: SchemaRegistry,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over SASL_SSL, the workers' principal allowed only what ``mw acls`` grants (the
    namespace's topics and groups, its transactional ids, idempotent writes): a worker
    SIGKILLed mid-run, and the outside reader sees every production once."""
    certs = Certificates(tmp_path / "certs").make()
    broker, sasl_port = secure_broker(certs, tmp_path / "kafka", acls=True)
    broker.start()
    try:
        guarded = GuardedStack(certs, sasl_port, stack.redis_url, stack.schema_registry_url)
        for k, v in guarded.env("admin").items():
            monkeypatch.setenv(k, v)  # the test's own clients: the administrator
        apply(guarded.bootstrap, pipeline_acls(namespace, "User:authority", ["User:worker"]))
        dep = Deployment(
            guarded.bootstrap,
            stack.redis_url,
            namespace,
            ROOT / "schemas",
            tmp_path,
            schema_registry_url=stack.schema_registry_url,
            computation=TRANSACTIONAL,
            worker_env=guarded.env("worker"),
        )
        inputs = make_inputs(10_000, 100, dup_rate=0.0, seed=31)
        workers = [dep.add_worker("w0").start(), dep.add_worker("w1").start()]
        writer = source_writer(guarded, registry, dep.numbers, "mw.examples.Number")
        injector = Injector(writer, inputs, rate=2_000)
        injector.start()
        try:
            wait_until(lambda: min(dep.commits()) >= 2, 90, what="two checkpoints per interval")
            workers[0].kill()
            workers[0].start()
            joined(injector, 120, "the injector")
            dep.wait_caught_up(writer.end_offsets, timeout=180)
        finally:
            for w in workers:
                w.terminate()
        admin = client_properties_of(guarded.env("admin"))
        seen = read_committed(guarded.bootstrap, topic_name(namespace, "sums"), **admin)
        problems = verify(inputs, registry, dep)
    finally:
        broker.stop()
    assert problems == [], "\n".join(problems)
    assert seen.records == len(inputs) and seen.duplicates == 0, (seen.records, seen.duplicates)


class _Abandoned(Exception):
    """Thrown from inside a transaction, so that the test aborts it."""


def _abandon() -> None:
    raise _Abandoned


@pytest.mark.parametrize("core", ["python", "native"])
def test_the_kits_readers_skip_what_an_aborted_transaction_wrote(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, core: str
) -> None:
    """A producer outside the kit writes 50 records in a transaction it aborts, then 50
    in one it commits: a worker (either core) reads ``read_committed`` and counts 50."""
    import random

    from mwcore.api.record import ID_HEADER, Production
    from mwcore.transport.transactions import TransactionalSender
    from testbed import wire

    dep = Deployment.on(stack, namespace, tmp_path, worker_env={"MW_CORE": core})
    serde = wire.serde(stack, registry, dep.numbers, "mw.examples.Number")
    rng = random.Random(37)

    def batch() -> list[Production]:
        value = serde.encode({"n": 1})
        keys = [b"k%d" % (i % 5) for i in range(50)]
        return [Production(rng.randbytes(16), dep.numbers, k, value, 1_000 + i) for i, k in enumerate(keys)]

    sender = TransactionalSender(stack.bootstrap, f"{namespace}.outside-writer")
    sender.begin()
    with pytest.raises(_Abandoned):
        sender.commit([batch()], [], None, ID_HEADER, before_commit=_abandon)
    sender.abort()
    assert sender.commit([batch()], [], None, ID_HEADER).status == "committed"
    sender.close()

    def counted() -> int:
        return sum(int(st.get("count", 0)) for st in dep.state().values())

    worker = dep.add_worker("w0").start()
    try:
        wait_until(lambda: counted() >= 50, 60, what="the committed records to be counted")
        time.sleep(2)  # (the aborted ones came first in the log: they would be in by now)
    finally:
        worker.terminate()
    assert counted() == 50
