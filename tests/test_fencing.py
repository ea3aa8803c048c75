"""Fencing tests (semantics I-5, I-6): a paused former owner changes nothing.

A worker stops itself (SIGSTOP) just before committing a batch; a successor takes
its intervals; the zombie then runs again. None of its writes may be accepted, and
none of the productions of its stale batch may reach Kafka from it. Negative control:
with fencing off (``MW_UNSAFE_DISABLE_FENCING``) the same check finds the zombie's
commits accepted and its stale productions sent.

Redis restarted under a running worker: the worker is fenced (every token carries
Redis's run id), takes its intervals back at once, and the result stays exact.
Negative control: with fenced intervals never taken back (``MW_UNSAFE_NO_RETAKE``)
the same check finds the worker stuck and the records after the restart lost.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import topic_name
from testbed.procs import joined, wait_until
from testbed.topics import read_topic
from testbed.wire import source_writer
from tests.support.running_sum import PARTITIONS, Deployment, Injector, make_inputs, verify


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
    dep = Deployment.on(stack, namespace, tmp_path, worker_env=env)
    store = RedisCheckpointStore(dep.r)
    fault_log = tmp_path / "faults.jsonl"
    inputs = make_inputs(30_000, 300, dup_rate=0.01, seed=5)
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
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

    zombie_id = f"a-{zombie.starts}".encode()

    def stale_sent() -> int:
        sums = read_topic(stack.bootstrap, topic_name(namespace, "sums"))
        return sum(1 for m in sums if m.headers.get("mw-sender") == zombie_id and m.id.hex() in stale_ids)

    def accepted_stale() -> int:
        after = {n: store.commits_by_token(intervals[n]).get(t, 0) for n, t in stale_tokens.items()}
        return sum(after[n] - before[n] for n in stale_tokens)

    def done_with_stale_state() -> bool:
        """The zombie has learned it lost its old assignment (the group told it), and
        its stale batch was refused (it says so) or sent; or a commit of its was
        accepted under a stale token (nothing after that can undo it: the check says so,
        and the wait need not run out)."""
        if accepted_stale():
            return True
        logs = zombie.logs()
        if '"partitions_lost"' not in logs and '"revoked"' not in logs:
            return False
        return '"fenced"' in logs or stale_sent() >= len(stale_ids)

    zombie.resume()
    with contextlib.suppress(TimeoutError):  # if not: the check says what happened
        wait_until(done_with_stale_state, 60, 0.5, "the zombie to act on its stale state")
    logged_fenced = '"fenced"' in zombie.logs()
    zombie.kill()
    accepted = accepted_stale()

    joined(injector, 60, "the injector")
    lagging = []
    try:
        dep.wait_caught_up(writer.end_offsets, timeout=120 if fencing else 30)
    except TimeoutError as exc:
        if fencing:
            raise
        # unfenced, the zombie's stale commit may leave the store where the successor
        # never catches up (CI saw it once): the check reports it beside the rest
        lagging.append(f"the workers did not catch up: {exc}")
    successor.terminate()
    problems = lagging + verify(inputs, registry, dep)
    return ZombieOutcome(stale_tokens, accepted, stale_sent(), logged_fenced, problems)


def zombie_problems(out: ZombieOutcome) -> list[str]:
    """What the zombie got through (empty when it changed nothing), and what ``verify``
    finds in the outputs."""
    problems = []
    if not out.zombie_logged_fenced:
        problems.append("the zombie never learned it was fenced")
    if out.accepted_stale_commits:
        problems.append(f"{out.accepted_stale_commits} commits under stale tokens were accepted")
    if out.stale_productions_sent:
        problems.append(f"{out.stale_productions_sent} productions of the zombie's stale batch were sent")
    return problems + out.problems


@pytest.mark.fencing
def test_zombie_writes_are_rejected(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    problems = zombie_problems(_zombie_scenario(stack, registry, namespace, tmp_path, fencing=True))
    assert problems == [], "\n".join(problems)


@pytest.mark.fencing
@pytest.mark.negative_control
def test_negative_control_without_fencing_accepts_stale_writes(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same scenario and check, commits not fenced: the zombie's writes land."""
    problems = zombie_problems(_zombie_scenario(stack, registry, namespace, tmp_path, fencing=False))
    print("negative control found:", *problems, sep="\n  ")
    # The token check is what refuses a zombie's commit: with it off they are accepted.
    # (Whether the zombie then also sends its stale batch before it is killed depends
    # on timing under load; it is printed above, not required.)
    assert any("commits under stale tokens were accepted" in p for p in problems), problems


def redis_restart_run(
    stack: LocalStack,
    registry: SchemaRegistry,
    namespace: str,
    tmp_path: Path,
    catch_up_s: float = 120,
    **env: str,
) -> list[str]:
    """Redis restarted (cleanly: the AOF keeps everything, the run id changes) under a
    worker with records coming in. Returns every problem found: the worker not caught
    up (within ``catch_up_s`` of the last record written) or dead, no fencing or
    retaking in its log, and what ``verify`` finds."""
    inputs = make_inputs(20_000, 100, dup_rate=0.01, seed=17)
    dep = Deployment.on(stack, namespace, tmp_path, worker_env=dict(env))
    worker = dep.add_worker("w0").start()
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=2_000)
    injector.start()
    problems = []
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
        stack.redis.stop()
        stack.redis.start()
        joined(injector, 60, "the injector")
        try:
            dep.wait_caught_up(writer.end_offsets, timeout=catch_up_s)
        except TimeoutError as exc:
            problems.append(f"the worker did not catch up after the restart: {exc}")
        if not worker.alive:
            problems.append("the worker died instead of taking its intervals back")
        logs = worker.logs()
        if '"restarted"' not in logs:
            problems.append("the worker was not fenced by the restart")
        if '"interval_retaken"' not in logs:
            problems.append("the worker took no interval back")
    finally:
        worker.terminate()
    return problems + verify(inputs, registry, dep)


@pytest.mark.fencing
def test_work_goes_on_after_a_redis_restart(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """A Redis restart voids every token (they carry its run id). The worker is fenced,
    takes its intervals back at once from what Redis kept, and goes on exactly once."""
    problems = redis_restart_run(stack, registry, namespace, tmp_path)
    assert problems == [], "\n".join(problems)


@pytest.mark.fencing
@pytest.mark.negative_control
def test_negative_control_without_retaking_a_redis_restart_stops_the_work(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same restart and check, fenced intervals never taken back: the worker stays
    fenced on them, and the records after the restart are never processed (20 s to
    catch up: with retaking, the worker is caught up within seconds of the last record)."""
    problems = redis_restart_run(stack, registry, namespace, tmp_path, catch_up_s=20, MW_UNSAFE_NO_RETAKE="1")
    print("negative control found:", *problems, sep="\n  ")
    assert any("did not catch up" in p for p in problems), problems
    assert any("productions lost" in p for p in problems), problems
