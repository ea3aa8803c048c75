"""What the interop tests share (``tests/test_interop*.py``): the Confluent wire format
and a real schema registry, with the ecosystem's own serializers on the other side."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import fastavro
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer

from mwcore.serde.avro import SchemaRegistry, decode_any
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
from mwcore.transport.schema_topic import SchemaTopic
from testbed.procs import ROOT, wait_until, worker_env
from testbed.topics import read_topic

COMPUTATION = "mwcore.examples.running_sum:RunningSum"
NUMBER = (ROOT / "schemas" / "examples" / "number.avsc").read_text()


def registry_client(stack: LocalStack) -> SchemaRegistryClient:
    assert stack.schema_registry_url is not None
    return SchemaRegistryClient({"url": stack.schema_registry_url, "timeout": 10})


def confluent_env(stack: LocalStack, namespace: str, **extra: str) -> dict[str, str]:
    assert stack.schema_registry_url is not None
    return worker_env(
        stack,
        namespace,
        **{
            "MW_WIRE": "confluent",
            "MW_LOG_LEVEL": "info",
            **extra,
        },
    )


def produce_numbers(stack: LocalStack, topic: str, rows: list[tuple[str, int]], schema: str = NUMBER) -> None:
    produce_to(registry_client(stack), stack, topic, rows, schema)


def produce_to(
    client: SchemaRegistryClient,
    stack: LocalStack,
    topic: str,
    rows: list[tuple[str, int]],
    schema: str = NUMBER,
    **extra: Any,
) -> None:
    """What a producer outside the kit writes: keys as strings, values (``{"n": n}`` and
    ``extra`` fields) by AvroSerializer."""
    serialize = AvroSerializer(client, schema)
    keys = StringSerializer()
    producer = Producer({"bootstrap.servers": stack.bootstrap, "enable.idempotence": True})
    for key, n in rows:
        ctx = SerializationContext(topic, MessageField.VALUE)
        producer.produce(topic, serialize({"n": n, **extra}, ctx), keys(key))
    assert producer.flush(30) == 0


def read_sums(
    stack: LocalStack,
    topic: str,
    expected: int,
    timeout: float = 90,
    client: SchemaRegistryClient | None = None,
) -> list[dict[str, Any]]:
    """What a consumer outside the kit reads: AvroDeserializer's values, in order."""
    deserialize = AvroDeserializer(client or registry_client(stack))
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


def totals(rows: list[tuple[str, int]]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for key, n in rows:
        totals[key] += n
    return dict(totals)


def last_sums(values: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each key's last sum (the one of the highest count)."""
    last: dict[str, dict[str, Any]] = {}
    for value in values:
        if value["count"] > last.get(value["key"], {"count": -1})["count"]:
            last[value["key"]] = value
    return last


def framed(schema_id: int, n: int) -> bytes:
    """A Number framed by hand (what any Confluent serializer writes for it)."""
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(json.loads(NUMBER)), {"n": n})
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


def mw(stack: LocalStack, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert stack.schema_registry_url is not None
    env = {
        "PATH": "/usr/bin:/bin",
        "MW_BOOTSTRAP": stack.bootstrap,
        "MW_NAMESPACE": namespace,
        "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
        "MW_SCHEMA_REGISTRY_URL": stack.schema_registry_url,
        "MW_LOG_LEVEL": "warning",
    }
    return subprocess.run(
        [sys.executable, "-m", "mwcore", "schemas", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def lines(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def decoded(stack: LocalStack, topic: str) -> dict[bytes, dict[str, Any]]:
    """Every value of ``topic`` in either framing, by record id (a copy re-sent after a
    takeover has its original's id): what a reader that reads both sees."""
    assert stack.schema_registry_url is not None
    local = SchemaRegistry.from_directory(ROOT / "schemas")
    local.use_ids(RegistryClient(RegistryAccess(stack.schema_registry_url)))
    local.use_source(SchemaTopic(stack.bootstrap, topic.split(".")[0]))
    return {m.id: decode_any(local, m.value)[1] for m in read_topic(stack.bootstrap, topic)}
