"""The schema registry failing under a running pipeline: down at start, restarted mid-run
(its file database kept), down mid-run; a registry of each test's own."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from mwcore.tools.stack.localproc import free_port
from mwcore.tools.stack.localstack import LocalStack
from mwcore.tools.stack.schema_registry import ApicurioRegistry
from mwcore.transport.topics import ensure_topics, topic_name
from testbed.procs import ROOT, WorkerProc, wait_until
from testbed.topics import read_topic
from tests.support.interop import COMPUTATION, confluent_env, framed, last_sums, produce_to, read_sums, totals

pytestmark = pytest.mark.interop


@pytest.fixture
def own_registry(tmp_path: Path) -> Iterator[ApicurioRegistry]:
    """A registry of the test's own, which it may stop and start (its schemas in its
    directory, as the session's)."""
    registry = ApicurioRegistry(directory=tmp_path / "registry").start()
    try:
        yield registry
    finally:
        registry.stop()


def test_the_registry_down_at_start_stops_the_worker_with_one_line(
    stack: LocalStack, namespace: str, tmp_path: Path
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mwcore", "run", COMPUTATION],
        env={
            **confluent_env(stack, namespace, MW_LOG_LEVEL="warning", MW_SCHEMA_REGISTRY_URL=closed),
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("%")]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "MW_SCHEMA_REGISTRY_URL" in lines[0] and closed in lines[0], lines
    assert time.monotonic() - began < 30


def test_a_registry_restart_mid_run_loses_nothing(
    stack: LocalStack, namespace: str, tmp_path: Path, own_registry: ApicurioRegistry
) -> None:
    """The registry stops and starts again (its file database kept) while a worker runs:
    the worker goes on, a producer and a consumer that start after it find every schema
    under its old id, and every record is summed once."""
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    ensure_topics(stack.bootstrap, {numbers: 4})
    url = own_registry.url
    env = confluent_env(stack, namespace, MW_SCHEMA_REGISTRY_URL=url)
    first = [(f"k{i % 3}", i) for i in range(50)]
    client = SchemaRegistryClient({"url": url, "timeout": 10})
    produce_to(client, stack, numbers, first)
    ids = {s: client.get_latest_version(s).schema_id for s in (f"{numbers}-value",)}
    worker = WorkerProc(COMPUTATION, env, tmp_path, "w0").start()
    try:
        read_sums(stack, sums, len(first), client=client)
        own_registry.stop()
        own_registry.start()
        again = SchemaRegistryClient({"url": url, "timeout": 10})  # nothing cached
        assert {s: again.get_latest_version(s).schema_id for s in ids} == ids
        assert f"{sums}-value" in again.get_subjects()
        second = [(f"k{i % 3}", 100 + i) for i in range(50)]
        produce_to(again, stack, numbers, second)
        out = read_sums(stack, sums, len(first) + len(second), client=again)
    finally:
        worker.terminate()
    assert {k: v["total"] for k, v in last_sums(out).items()} == totals(first + second)


def test_the_registry_down_mid_run(
    stack: LocalStack, namespace: str, tmp_path: Path, own_registry: ApicurioRegistry
) -> None:
    """With the registry down, a worker goes on with the schemas it has cached; a record
    whose schema id it does not know waits a bounded time and is a dead letter naming
    why, and the records after it are summed."""
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    dead = topic_name(namespace, "running_sum.dead-letters")
    ensure_topics(stack.bootstrap, {numbers: 4})  # one key: one partition, in order
    client = SchemaRegistryClient({"url": own_registry.url, "timeout": 10})
    produce_to(client, stack, numbers, [("k", 1)])
    known = int(client.get_latest_version(f"{numbers}-value").schema_id or 0)
    env = confluent_env(stack, namespace, MW_SCHEMA_REGISTRY_URL=own_registry.url)
    worker = WorkerProc(COMPUTATION, env, tmp_path, "w0").start()
    try:
        read_sums(stack, sums, 1, client=client)
        own_registry.stop()
        producer = Producer({"bootstrap.servers": stack.bootstrap})
        producer.produce(numbers, framed(known, 2), b"k")
        producer.produce(numbers, framed(known + 1000, 5), b"k")  # an id it never saw
        producer.produce(numbers, framed(known, 3), b"k")
        assert producer.flush(30) == 0
        began = time.monotonic()
        wait_until(
            lambda: len(read_topic(stack.bootstrap, dead)) == 1, 60, 0.5, "the unknown id's dead letter"
        )
        assert time.monotonic() - began < 30
        wait_until(lambda: len(read_topic(stack.bootstrap, sums)) == 3, 60, 0.5, "the known ids' sums")
    finally:
        worker.terminate()
    [letter] = read_topic(stack.bootstrap, dead)
    assert letter.headers["mw-reason"] == b"unknown_schema"
    assert b"cannot be reached" in letter.headers["mw-error"], letter.headers["mw-error"]
    assert letter.value == framed(known + 1000, 5)  # as it came
    sum_schema = fastavro.parse_schema(json.loads((ROOT / "schemas" / "examples" / "sum.avsc").read_text()))
    values: list[Any] = [
        fastavro.schemaless_reader(io.BytesIO(m.value[5:]), sum_schema, None)
        for m in read_topic(stack.bootstrap, sums)
    ]
    assert [v["total"] for v in values] == [1, 3, 6]
