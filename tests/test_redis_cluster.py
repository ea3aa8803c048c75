"""The guarantees on a real Redis Cluster (three primaries, each with a replica).

The exactly-once, fencing, timer and watermark tests run again here, unchanged, with
``MW_REDIS_URL`` naming one node of a local cluster (``tools/stack/redis_cluster.py``): every
command the kit sends must touch keys of one hash slot, or the cluster refuses it
(``CROSSSLOT``), so these tests fail on any command that does not.

Then a failover: while workers run, the primary serving some intervals is SIGKILLed,
its replica takes over, and every result stays exact (checkpoints wait for the
replica's acknowledgement, ``WAIT``: the promoted replica has every committed one).
The mechanism's own check: with the replica unable to acknowledge, a checkpoint does
not count as committed (``NotReplicatedError``); without ``WAIT`` it does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mwcore.serde.avro import SchemaRegistry
from mwcore.store.checkpoint import Checkpoint
from mwcore.store.client import default_wait_replicas, is_cluster
from mwcore.store.client import redis_client as connect_redis
from mwcore.store.fast_script import NotReplicatedError
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore
from mwcore.tools.stack.localstack import LocalStack
from mwcore.tools.stack.redis_cluster import LocalRedisCluster
from testbed.procs import WorkerProc, joined, wait_until
from testbed.wire import source_writer
from tests.support.running_sum import Deployment, Injector, InputRecord, make_inputs, verify
from tests.test_exactly_once import test_crash_storm_keeps_exactly_once as test_crash_storm_on_a_cluster
from tests.test_fencing import test_zombie_writes_are_rejected as test_zombie_on_a_cluster
from tests.test_timers import test_timers_fire_in_order_once_and_survive_restarts as test_timers_on_a_cluster
from tests.test_watermarks import (
    test_records_in_the_backlog_hold_the_watermark_and_no_timer_fires_early as test_backlog_on_a_cluster,
)
from tests.test_watermarks import (
    test_reports_under_a_stale_token_are_rejected as test_stale_token_on_a_cluster,
)

pytestmark = pytest.mark.cluster

__all__ = [
    "test_backlog_on_a_cluster",
    "test_crash_storm_on_a_cluster",
    "test_stale_token_on_a_cluster",
    "test_timers_on_a_cluster",
    "test_zombie_on_a_cluster",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedisCluster]:
    c = LocalRedisCluster(directory=tmp_path_factory.mktemp("redis-cluster"), debug_command=True).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def stack(stack: LocalStack, cluster: LocalRedisCluster) -> LocalStack:
    """The session's broker, with the Redis Cluster as the store (this module only)."""
    return LocalStack(workdir=stack.workdir, broker=stack.broker, redis=cluster, registry=stack.registry)


def test_the_client_finds_the_cluster_from_one_node(cluster: LocalRedisCluster) -> None:
    client = connect_redis(cluster.url)
    assert is_cluster(client) and default_wait_replicas(client) == 1
    store = RedisCheckpointStore(client)
    primaries = set()
    for index in range(12):  # intervals spread over the primaries, each script on one
        iv = IntervalId("spread", "c", index)
        token = store.grant(iv, "me")
        assert store.commit(iv, token, Checkpoint(positions={"in:0": index})) == 1
        primaries.add(cluster.primary_of(f"mw:{iv.tag()}:token").port)
    assert len(primaries) == 3


def _replica_port(cluster: LocalRedisCluster, key: str) -> int:
    """The port of the replica of the primary that serves ``key``."""
    c = redis.Redis(port=cluster.primary_of(key).port)
    try:
        return int(c.info("replication")["slave0"]["port"])
    finally:
        c.close()


def _sleep_replica(cluster: LocalRedisCluster, key: str, seconds: float) -> threading.Thread:
    """Block the replica of ``key``'s primary (DEBUG SLEEP): it cannot acknowledge."""
    replica_port = _replica_port(cluster, key)

    def sleep() -> None:
        r = redis.Redis(port=replica_port, socket_timeout=seconds + 5)
        r.execute_command("DEBUG", "SLEEP", seconds)  # type: ignore[no-untyped-call]
        r.close()

    t = threading.Thread(target=sleep)
    t.start()
    time.sleep(0.2)
    return t


def _commit_with_the_replica_asleep(cluster: LocalRedisCluster, replicas: int, name: str) -> str:
    """A checkpoint committed while its primary's replica cannot acknowledge (with
    ``replicas`` to wait for, as ``MW_REDIS_WAIT_REPLICAS``): ``"committed"``, or the
    error that kept it from counting as committed."""
    client = connect_redis(cluster.url)
    iv = IntervalId(name, "c", 0)
    store = RedisCheckpointStore(client, replicas=replicas, wait_ms=500)
    token = store.grant(iv, "me")
    assert store.commit(iv, token, Checkpoint(positions={"in:0": 1})) == 1  # replica up: fine
    sleeper = _sleep_replica(cluster, f"mw:{iv.tag()}:token", 2.0)
    try:
        store.commit(iv, token, Checkpoint(positions={"in:0": 2}))
        return "committed"
    except NotReplicatedError as exc:
        return str(exc)
    finally:
        sleeper.join()
        cluster.wait_ok()


def test_a_checkpoint_waits_for_its_replica(cluster: LocalRedisCluster) -> None:
    """With WAIT (one replica) a checkpoint the replica has not acknowledged is an
    error, not a commit: the worker stops rather than produce from it."""
    outcome = _commit_with_the_replica_asleep(cluster, 1, "wait")
    assert "0 of 1 replicas acknowledged" in outcome, outcome


@pytest.mark.negative_control
def test_negative_control_without_wait_an_unreplicated_checkpoint_counts(cluster: LocalRedisCluster) -> None:
    """The same commit and check without WAIT (``MW_REDIS_WAIT_REPLICAS=0``): it returns
    as committed while no replica has it (a failover now would lose it)."""
    assert _commit_with_the_replica_asleep(cluster, 0, "nowait") == "committed"


@pytest.mark.exactly_once
@pytest.mark.slow
def test_a_primary_failover_loses_no_checkpoint(
    stack: LocalStack, cluster: LocalRedisCluster, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    cluster.restore()
    inputs = make_inputs(60_000, 500, dup_rate=0.01, seed=17)
    dep = Deployment.on(stack, namespace, tmp_path)
    workers = [dep.add_worker("w0").start(), dep.add_worker("w1").start()]
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=3_000)
    injector.start()
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
        victim = cluster.primary_of(dep.key(0, "token"))
        before = dep.commits()
        victim.kill()  # SIGKILL: its replica is promoted after the node timeout
        wait_until(lambda: cluster.primary_of(dep.key(0, "token")) is not victim, 60, what="the failover")
        wait_until(
            lambda: min(c - b for c, b in zip(dep.commits(), before, strict=True)) >= 3,
            90,
            what="three more checkpoints per interval after the failover",
        )
        assert all(w.alive for w in workers), "a worker stopped over the failover"
        joined(injector, 120, "the injector")
        dep.wait_caught_up(writer.end_offsets, timeout=180)
    finally:
        injector.release.set()
        for w in workers:
            w.terminate()
    problems = verify(inputs, registry, dep)
    assert problems == [], "\n".join(problems)


def _cut_replica(cluster: LocalRedisCluster, key: str) -> redis.Redis:
    """Cut the replication link of ``key``'s primary's replica, and keep it cut (the
    replica tries to reconnect with a password the primary refuses); it stays a
    replica the cluster can promote, without the writes since. Returns a client of it."""
    replica = redis.Redis(port=_replica_port(cluster, key))
    replica.config_set("masterauth", "not-the-password")
    replica.client_kill_filter(_type="master")
    wait_until(lambda: replica.info("replication")["master_link_status"] == "down", 10, what="the cut")
    return replica


def _lagging_failover(
    stack: LocalStack,
    cluster: LocalRedisCluster,
    registry: SchemaRegistry,
    namespace: str,
    tmp_path: Path,
    **env: str,
) -> tuple[Deployment, list[WorkerProc], list[InputRecord], list[int]]:
    """Workers run; the replica of interval 0's primary loses its replication link
    while checkpoints go on; the primary is SIGKILLed in that window, so the replica
    that takes over lacks the checkpoints since. Returns the exit codes of the workers
    that stopped on their own by the end."""
    inputs = make_inputs(40_000, 400, dup_rate=0.01, seed=23)
    dep = Deployment.on(stack, namespace, tmp_path, worker_env=env)
    workers = [dep.add_worker("w0").start(), dep.add_worker("w1").start()]
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=3_000)
    injector.start()
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
        key = dep.key(0, "token")
        victim = cluster.primary_of(key)
        replica = _cut_replica(cluster, key)
        time.sleep(1.5)  # checkpoints the replica does not get
        victim.kill()
        wait_until(lambda: cluster.primary_of(key) is not victim, 60, what="the failover")
        replica.config_set("masterauth", "")
        stopped: list[int] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until a worker stops, or all is read
            stopped = [w.proc.returncode for w in workers if w.proc is not None and w.proc.poll() is not None]
            if stopped or (not injector.is_alive() and dep.caught_up(writer.end_offsets)):
                break
            time.sleep(0.2)
        joined(injector, 120, "the injector")
        if not stopped:
            dep.wait_caught_up(writer.end_offsets, timeout=180)
    finally:
        injector.release.set()
        codes = [w.proc.returncode for w in workers if w.proc is not None and w.proc.poll() is not None]
        for w in workers:
            w.terminate()
    return dep, workers, inputs, codes


@pytest.mark.exactly_once
@pytest.mark.slow
def test_a_failover_to_a_lagging_replica_loses_no_committed_checkpoint(
    stack: LocalStack, cluster: LocalRedisCluster, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """With WAIT (the default on a cluster with replicas) the checkpoints the replica
    never got were never committed: nothing left from them, the workers go on, exact."""
    cluster.restore()
    dep, workers, inputs, stopped = _lagging_failover(stack, cluster, registry, namespace, tmp_path)
    assert stopped == [], [w.logs()[-2000:] for w in workers]
    problems = verify(inputs, registry, dep)
    assert problems == [], "\n".join(problems)


@pytest.mark.exactly_once
@pytest.mark.negative_control
@pytest.mark.slow
def test_negative_control_without_wait_a_lagging_failover_stops_the_worker(
    stack: LocalStack, cluster: LocalRedisCluster, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """Without WAIT the promoted replica lacks committed checkpoints: the commit witness
    finds the store behind what Kafka witnessed, and the worker stops (exit 2) rather
    than produce from it."""
    cluster.restore()
    _, workers, _, stopped = _lagging_failover(
        stack, cluster, registry, namespace, tmp_path, MW_REDIS_WAIT_REPLICAS="0"
    )
    assert 2 in stopped, stopped
    assert any("but Kafka witnessed" in w.logs() for w in workers)
