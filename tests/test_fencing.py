"""Fencing tests (semantics I-5, I-6): a paused former owner changes nothing.

A worker stops itself (SIGSTOP) just before committing a batch; a successor takes
its intervals; the zombie then runs again. None of its writes may be accepted, and
none of the productions of its stale batch may reach Kafka from it.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from mwcore.localstack import LocalStack
from mwcore.redis_store import RedisCheckpointStore
from mwcore.serde import SchemaRegistry
from mwcore.source import SourceWriter
from mwcore.store import IntervalId
from mwcore.transport import topic_name
from tests.conftest import ROOT
from tests.support.procs import wait_until
from tests.support.running_sum import PARTITIONS, Deployment, Injector, make_inputs, verify
from tests.support.topics import read_topic


@dataclass
class ZombieOutcome:
    stale_tokens: dict[str, str]
    accepted_stale_commits: int
    stale_productions_sent: int
    zombie_logged_fenced: bool
    problems: list[str]


def _zombie_scenario(
    stack: LocalStack,
    registry: SchemaRegistry,
    namespace: str,
    tmp_path: Path,
    fencing: bool,
) -> ZombieOutcome:
    env = {} if fencing else {"MW_UNSAFE_DISABLE_FENCING": "1"}
    dep = Deployment(stack.bootstrap, stack.redis_url, namespace, ROOT / "schemas", tmp_path, worker_env=env)
    store = RedisCheckpointStore(dep.r)
    fault_log = tmp_path / "faults.jsonl"
    inputs = make_inputs(30_000, 300, dup_rate=0.01, seed=5)
    writer = SourceWriter(stack.bootstrap, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=2_000)
    injector.start()

    zombie = dep.add_worker("a").start(
        MW_FAULTS="before_commit:stop:1:once:after=40", MW_FAULT_LOG=str(fault_log)
    )
    wait_until(lambda: fault_log.exists() and fault_log.read_text().strip(), 60, what="the zombie to pause")
    paused = json.loads(fault_log.read_text().splitlines()[0])
    stale_tokens: dict[str, str] = paused["tokens"]
    stale_ids = set(paused["productions"])
    assert len(stale_tokens) == PARTITIONS and stale_ids, paused
    intervals = {
        str(IntervalId(namespace, "running_sum", i)): IntervalId(namespace, "running_sum", i)
        for i in range(PARTITIONS)
    }

    successor = dep.add_worker("b").start()

    def successor_owns_all() -> bool:
        for name, token in stale_tokens.items():
            current = dep.r.get(store.keys(intervals[name]).token)
            if current is None or current.decode() == token:
                return False
        return True

    wait_until(successor_owns_all, 60, what="the successor to take every interval")
    before = {n: store.commits_by_token(intervals[n]).get(t, 0) for n, t in stale_tokens.items()}

    zombie.resume()
    with contextlib.suppress(TimeoutError):  # without fencing nothing refuses it: see counters
        wait_until(lambda: '"fenced"' in zombie.logs(), 10, what="the zombie to be fenced")
    time.sleep(1.0)  # let it act on whatever it believes (send, delete) before it could rejoin
    logged_fenced = '"fenced"' in zombie.logs()
    zombie.kill()
    after = {n: store.commits_by_token(intervals[n]).get(t, 0) for n, t in stale_tokens.items()}
    accepted = sum(after[n] - before[n] for n in stale_tokens)

    injector.join(60)
    assert injector.error is None, injector.error
    dep.wait_caught_up(writer.end_offsets, timeout=120)
    successor.terminate()

    sums = read_topic(stack.bootstrap, topic_name(namespace, "sums"))
    zombie_id = f"a-{zombie.starts}".encode()
    stale_sent = sum(1 for m in sums if m.headers.get("mw-sender") == zombie_id and m.id.hex() in stale_ids)
    return ZombieOutcome(stale_tokens, accepted, stale_sent, logged_fenced, verify(inputs, registry, dep))


@pytest.mark.fencing
def test_zombie_writes_are_rejected(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    out = _zombie_scenario(stack, registry, namespace, tmp_path, fencing=True)
    assert out.zombie_logged_fenced, "the zombie never learned it was fenced"
    assert out.accepted_stale_commits == 0
    assert out.stale_productions_sent == 0
    assert out.problems == [], out.problems


@pytest.mark.fencing
def test_negative_control_without_fencing_accepts_stale_writes(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    out = _zombie_scenario(stack, registry, namespace, tmp_path, fencing=False)
    assert out.accepted_stale_commits > 0, "the control did not show the zombie's writes landing"
    assert out.stale_productions_sent > 0


@pytest.mark.fencing
def test_work_goes_on_after_a_redis_restart(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """A Redis restart voids every token (they carry its run id). The worker is fenced,
    takes its intervals back at once from what Redis kept, and goes on exactly once."""
    inputs = make_inputs(20_000, 100, dup_rate=0.01, seed=17)
    dep = Deployment(stack.bootstrap, stack.redis_url, namespace, ROOT / "schemas", tmp_path)
    worker = dep.add_worker("w0").start()
    writer = SourceWriter(stack.bootstrap, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=2_000)
    injector.start()
    wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")

    stack.redis.stop()  # a clean restart: the AOF keeps everything, the run id changes
    stack.redis.start()

    injector.join(60)
    assert injector.error is None, injector.error
    dep.wait_caught_up(writer.end_offsets, timeout=120)
    assert worker.alive, "the worker died instead of taking its intervals back"
    logs = worker.logs()
    assert '"restarted"' in logs and '"interval_retaken"' in logs
    worker.terminate()
    assert verify(inputs, registry, dep) == []
