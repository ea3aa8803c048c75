"""Three Apache Kafka brokers (``mwcore.tools.stack.kafka_cluster``): every stream the kit
creates has three replicas and needs two in sync, and a broker SIGKILLed while workers
run loses nothing and duplicates nothing (it comes back and catches up).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import default_wait_replicas, is_cluster
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.kafka_cluster import KafkaCluster
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import admin_config, topic_name
from testbed.procs import ROOT, joined, wait_until
from testbed.wire import source_writer
from tests.support.running_sum import Deployment, Injector, make_inputs, verify

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    c = KafkaCluster(brokers=3, directory=tmp_path_factory.mktemp("kafka-cluster"), heap_mb=384)
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def stack(stack: LocalStack, brokers: KafkaCluster) -> LocalStack:
    """The session's Redis, with the three brokers (this module only)."""
    return LocalStack(workdir=stack.workdir, broker=brokers, redis=stack.redis, registry=stack.registry)


def _replication(bootstrap: str, topic: str) -> tuple[int, str]:
    admin = AdminClient(admin_config(bootstrap))
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    replicas = {len(p.replicas) for p in meta.partitions.values()}
    assert len(replicas) == 1, replicas
    res = ConfigResource(ResourceType.TOPIC, topic)
    conf = admin.describe_configs([res])[res].result(timeout=10)
    return replicas.pop(), conf["min.insync.replicas"].value


@pytest.mark.exactly_once
@pytest.mark.slow
def test_a_broker_sigkilled_under_load_loses_nothing(
    stack: LocalStack, brokers: KafkaCluster, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    inputs = make_inputs(40_000, 400, dup_rate=0.01, seed=31)
    dep = Deployment.on(stack, namespace, tmp_path)
    workers = [dep.add_worker("w0").start(), dep.add_worker("w1").start()]
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=2_000)
    injector.start()
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 90, what="two checkpoints per interval")
        before = dep.commits()
        brokers.kill(1)  # SIGKILL: its partitions' leaders move to the other two
        wait_until(
            lambda: min(c - b for c, b in zip(dep.commits(), before, strict=True)) >= 3,
            90,
            what="three more checkpoints per interval with a broker down",
        )
        brokers.start_node(1)
        joined(injector, 120, "the injector")
        dep.wait_caught_up(writer.end_offsets, timeout=180)
        assert all(w.alive for w in workers), "a worker stopped over the broker's death"
    finally:
        injector.release.set()
        for w in workers:
            w.terminate()
    problems = verify(inputs, registry, dep)
    assert problems == [], "\n".join(problems)
    for stream in ("numbers", "sums"):  # what the kit created: the input and the output
        assert _replication(stack.bootstrap, topic_name(namespace, stream)) == (3, "2")


def test_mw_stack_starts_three_brokers_and_a_redis_cluster(tmp_path: Path) -> None:
    """``mw stack --brokers 3 --redis-cluster`` (what ``mw up`` starts with the same
    options): the addresses it prints reach three brokers and a Redis Cluster."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mwcore", "stack", "--brokers", "3", "--redis-cluster", "--duration", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        exports = dict(proc.stdout.readline().strip().removeprefix("export ").split("=", 1) for _ in range(2))
        bootstrap, redis_url = exports["MW_BOOTSTRAP"], exports["MW_REDIS_URL"]
        assert len(bootstrap.split(",")) == 3
        meta = AdminClient(admin_config(bootstrap)).list_topics(timeout=10)
        assert len(meta.brokers) == 3
        client = connect_redis(redis_url)
        assert is_cluster(client) and default_wait_replicas(client) == 1
        assert client.set("mw:probe", "1") and client.get("mw:probe") == b"1"
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
