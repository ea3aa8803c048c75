"""The kit among the Kafka ecosystem's tools: the Confluent wire format and a real schema
registry (Apicurio Registry, the session stack's), on the real broker and Redis.

A producer outside the kit (confluent-kafka's ``AvroSerializer``: the bytes Java's
``KafkaAvroSerializer`` writes too) feeds a kit computation, and a consumer outside it
(``AvroDeserializer``) reads what the computation produced.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer

from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics, topic_name
from testbed.procs import ROOT, WorkerProc, wait_until, worker_env

pytestmark = pytest.mark.interop

COMPUTATION = "mwcore.examples.running_sum:RunningSum"
NUMBER = (ROOT / "schemas" / "examples" / "number.avsc").read_text()


def _registry(stack: LocalStack) -> SchemaRegistryClient:
    assert stack.schema_registry_url is not None
    return SchemaRegistryClient({"url": stack.schema_registry_url, "timeout": 10})


def _confluent_env(stack: LocalStack, namespace: str, **extra: str) -> dict[str, str]:
    assert stack.schema_registry_url is not None
    return worker_env(
        stack.bootstrap,
        stack.redis_url,
        namespace,
        MW_WIRE="confluent",
        MW_SCHEMA_REGISTRY_URL=stack.schema_registry_url,
        **{"MW_LOG_LEVEL": "info", **extra},
    )


def _produce_numbers(
    stack: LocalStack, topic: str, rows: list[tuple[str, int]], schema: str = NUMBER
) -> None:
    """What a producer outside the kit writes: keys as strings, values by AvroSerializer."""
    serialize = AvroSerializer(_registry(stack), schema)
    keys = StringSerializer()
    producer = Producer({"bootstrap.servers": stack.bootstrap, "enable.idempotence": True})
    for key, n in rows:
        ctx = SerializationContext(topic, MessageField.VALUE)
        producer.produce(topic, serialize({"n": n}, ctx), keys(key))
    assert producer.flush(30) == 0


def _read_sums(stack: LocalStack, topic: str, expected: int, timeout: float = 90) -> list[dict[str, Any]]:
    """What a consumer outside the kit reads: AvroDeserializer's values, in order."""
    deserialize = AvroDeserializer(_registry(stack))
    group = f"outside-{uuid.uuid4().hex}"
    consumer = Consumer(
        {"bootstrap.servers": stack.bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    out: list[dict[str, Any]] = []

    def enough() -> bool:
        for m in consumer.consume(500, 0.5):
            if m.error() is None:
                value = deserialize(m.value(), SerializationContext(topic, MessageField.VALUE))
                out.append(value)
        return len(out) >= expected

    try:
        wait_until(enough, timeout, 0.0, f"{expected} sums on {topic}")
    finally:
        consumer.close()
    return out


def _totals(rows: list[tuple[str, int]]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for key, n in rows:
        totals[key] += n
    return dict(totals)


def test_avro_serializer_in_avro_deserializer_out(stack: LocalStack, namespace: str, tmp_path: Path) -> None:
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    ensure_topics(stack.bootstrap, {numbers: 4})
    rows = [(f"k{i % 7}", i) for i in range(300)]
    _produce_numbers(stack, numbers, rows)
    worker = WorkerProc(COMPUTATION, _confluent_env(stack, namespace), tmp_path, "w0").start()
    try:
        out = _read_sums(stack, sums, len(rows))
    finally:
        worker.terminate()
    last: dict[str, dict[str, Any]] = {}
    for value in out:
        if value["count"] > last.get(value["key"], {"count": -1})["count"]:
            last[value["key"]] = value
    assert {k: v["total"] for k, v in last.items()} == _totals(rows)
    assert len(out) == len(rows)  # once each
    # the subjects follow TopicNameStrategy, at the kit's compatibility level
    client = _registry(stack)
    assert {f"{numbers}-value", f"{sums}-value"} <= set(client.get_subjects())
    assert client.get_compatibility(f"{sums}-value") == "FULL_TRANSITIVE"


def test_a_producer_first_upgrade_through_the_registry(
    stack: LocalStack, namespace: str, tmp_path: Path
) -> None:
    """A producer outside the kit moves to a new version of the input's schema (a field
    added, with a default) before the computation knows it: the worker learns the
    writer schema by id from the registry and reads it into its own version."""
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    ensure_topics(stack.bootstrap, {numbers: 4})
    old = [(f"k{i % 5}", i) for i in range(100)]
    _produce_numbers(stack, numbers, old)
    worker = WorkerProc(COMPUTATION, _confluent_env(stack, namespace), tmp_path, "w0").start()
    try:
        _read_sums(stack, sums, len(old))
        newer = json.loads(NUMBER)
        newer["fields"].append({"name": "note", "type": "string", "default": ""})
        new = [(f"k{i % 5}", 1000 + i) for i in range(100)]
        serialize = AvroSerializer(_registry(stack), json.dumps(newer))
        producer = Producer({"bootstrap.servers": stack.bootstrap})
        for key, n in new:
            ctx = SerializationContext(numbers, MessageField.VALUE)
            producer.produce(numbers, serialize({"n": n, "note": "v2"}, ctx), key.encode())
        assert producer.flush(30) == 0
        out = _read_sums(stack, sums, len(old) + len(new))
    finally:
        worker.terminate()
    assert len(_registry(stack).get_versions(f"{numbers}-value")) == 2
    final: dict[str, int] = {}
    for value in out:
        final[value["key"]] = max(final.get(value["key"], 0), value["total"])
    assert final == _totals(old + new)


def test_an_incompatible_schema_is_refused_at_deploy(
    stack: LocalStack, namespace: str, tmp_path: Path
) -> None:
    """The output's subject already holds a schema the computation's cannot read (nor be
    read by): the worker stops at start with one line and exit code 2, and registers
    nothing (not even its input's subject)."""
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    client = _registry(stack)
    other = {
        "type": "record",
        "name": "Sum",
        "namespace": "mw.examples",
        "fields": [{"name": "x", "type": "int"}],
    }

    client.set_compatibility(f"{sums}-value", "FULL_TRANSITIVE")
    client.register_schema(f"{sums}-value", Schema(json.dumps(other), "AVRO"))
    proc = subprocess.run(
        [sys.executable, "-m", "mwcore", "run", COMPUTATION],
        env={**_confluent_env(stack, namespace, MW_LOG_LEVEL="warning"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "incompatible" in lines[0] and f"{sums}-value" in lines[0], proc.stderr
    assert f"{numbers}-value" not in client.get_subjects()
    assert len(client.get_versions(f"{sums}-value")) == 1
