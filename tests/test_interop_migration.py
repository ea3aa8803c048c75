"""A pipeline moved from the single-object framing to the Confluent one in a rolling
deploy, and Spark reading an archive that spans the move."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mwcore.api.signing import Signer
from mwcore.serde.avro import SchemaRegistry
from mwcore.serde.framing import SINGLE_OBJECT, Framing, frame_of
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.transport.topics import ensure_topics, topic_name
from mwcore.transport.writer import SourceWriter
from testbed.hostile import dead_letter_reasons
from testbed.procs import ROOT, WorkerProc, wait_until, worker_env
from testbed.topics import read_topic
from tests.support.interop import COMPUTATION, NUMBER, decoded, last_sums, lines, mw, registry_client, totals

pytestmark = pytest.mark.interop


def test_a_rolling_migration_from_single_object_to_confluent_framing_is_exact(
    stack: LocalStack, namespace: str, tmp_path: Path
) -> None:
    """The documented migration (docs/ecosystem.md), in a rolling deploy with a pipeline
    secret: a single-object pipeline of version-1 MACs (as before) has its schemas
    imported; readers that take both framings and both MACs replace it; then writers
    move to the Confluent framing and MAC version 2, their readers started before the
    old ones stop; then the old framing and MAC are turned off. Every record is summed
    once, whatever framing it came in."""
    assert stack.schema_registry_url is not None
    secret = "the migration test's pipeline secret"
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    ensure_topics(stack.bootstrap, {numbers: 4})
    schemas = SchemaTopic(stack.bootstrap, namespace)
    rows: list[tuple[str, int]] = []
    base = {
        "MW_ID_SECRET": secret,
        "MW_SCHEMA_REGISTRY_URL": stack.schema_registry_url,
        "MW_LOG_LEVEL": "info",
    }

    def env(**extra: str) -> dict[str, str]:
        return worker_env(stack, namespace, **base, **extra)

    def write(writer: SourceWriter, count: int) -> None:
        for _ in range(count):
            key, n = f"k{len(rows) % 6}", len(rows) + 1
            writer.write(key, {"n": n}, 1_700_000_000_000 + len(rows))
            rows.append((key, n))
        writer.flush()

    def summed() -> bool:
        return len(decoded(stack, sums)) >= len(rows)

    old_writer = SourceWriter(
        stack.bootstrap,
        registry,
        numbers,
        "mw.examples.Number",
        schemas,
        framing=SINGLE_OBJECT,
        signer=Signer(secret, "write"),
    )
    before = {"MW_WIRE": "single-object", "MW_MAC_V1": "write"}  # what a version before the migration does
    workers = [WorkerProc(COMPUTATION, env(**before), tmp_path, "a").start()]
    write(old_writer, 120)
    wait_until(summed, 90, 0.5, "the old pipeline's sums")
    # 1. the writer schemas into the registry
    imported = mw(stack, namespace, "import")
    assert imported.returncode == 0, imported.stderr
    assert {line["subject"] for line in lines(imported)} >= {f"{numbers}-value", f"{sums}-value"}
    # 2. readers of both framings and both MACs, still writing as before: rolled in
    workers.append(
        WorkerProc(COMPUTATION, env(**before, MW_WIRE_READ_ALSO="confluent"), tmp_path, "b").start()
    )
    wait_until(lambda: workers[1].ready, 60, what="the second step's worker to join")
    workers.pop(0).terminate()
    write(old_writer, 60)
    # 3. writers move: the source, then the workers (the new ones in before the old go)
    ids_ = RegistryClient(RegistryAccess(stack.schema_registry_url)).deploy(
        {numbers: registry.latest("mw.examples.Number")}
    )
    new_writer = SourceWriter(
        stack.bootstrap,
        registry,
        numbers,
        "mw.examples.Number",
        framing=Framing("confluent", ids_[numbers]),
        signer=Signer(secret, "read"),
    )
    write(new_writer, 60)
    workers.append(
        WorkerProc(
            COMPUTATION,
            env(MW_MAC_V1="read", MW_WIRE="confluent", MW_WIRE_READ_ALSO="single-object"),
            tmp_path,
            "c",
        ).start()
    )
    wait_until(lambda: workers[1].ready, 60, what="the third step's worker to join")
    write(new_writer, 60)
    workers.pop(0).terminate()
    write(new_writer, 60)
    wait_until(summed, 90, 0.5, "the sums of the third step")
    # 4. the old framing and MAC off
    workers.append(WorkerProc(COMPUTATION, env(MW_WIRE="confluent"), tmp_path, "d").start())
    wait_until(lambda: workers[1].ready, 60, what="the last step's worker to join")
    workers.pop(0).terminate()
    write(new_writer, 60)
    try:
        wait_until(summed, 90, 0.5, "every sum")
    finally:
        for w in workers:
            w.terminate()
    out = decoded(stack, sums)
    framings = {frame_of(m.value).wire for m in read_topic(stack.bootstrap, sums)}  # type: ignore[union-attr]
    assert framings == {"single-object", "confluent"}
    last = last_sums(out.values())
    assert {k: v["total"] for k, v in last.items()} == totals(rows)
    per_key: dict[str, int] = defaultdict(int)
    for key, _ in rows:
        per_key[key] += 1
    assert {k: v["count"] for k, v in last.items()} == per_key  # each record once
    assert len(out) == len(rows)
    assert dead_letter_reasons(stack.bootstrap, namespace, "running_sum") == {}


@pytest.mark.spark
def test_read_archive_over_confluent_framed_topics(stack: LocalStack, namespace: str, spark: Any) -> None:
    """Spark reads a stream written in both framings (before and after a migration): by
    id from the registry (the driver takes the subject's versions to the executors) and
    by fingerprint, into the reader schema; nothing dropped, each value as written."""
    from mwcore.archive.spark.source import read_archive

    assert stack.schema_registry_url is not None
    numbers = topic_name(namespace, "numbers")
    ensure_topics(stack.bootstrap, {numbers: 2})
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    old = SourceWriter(
        stack.bootstrap,
        registry,
        numbers,
        "mw.examples.Number",
        SchemaTopic(stack.bootstrap, namespace),
        framing=SINGLE_OBJECT,
    )
    for i in range(50):
        old.write(f"k{i % 4}", {"n": i}, 1_700_000_000_000 + i)
    old.flush()
    newer = json.loads(NUMBER)
    newer["fields"].append({"name": "note", "type": "string", "default": ""})
    serialize = AvroSerializer(registry_client(stack), json.dumps(newer))  # a producer outside the kit
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    for i in range(50, 120):
        ctx = SerializationContext(numbers, MessageField.VALUE)
        producer.produce(
            numbers,
            serialize({"n": i, "note": "x"}, ctx),
            f"k{i % 4}".encode(),
            timestamp=1_700_000_000_000 + i,
        )
    assert producer.flush(30) == 0
    df = read_archive(
        spark,
        stack.bootstrap,
        "numbers",
        namespace,
        ROOT / "schemas",
        avroSchema="mw.examples.Number",
        schemaRegistryUrl=stack.schema_registry_url,
    )
    rows = df.select("n", "decode_error", "key").collect()
    assert [r["decode_error"] for r in rows if r["decode_error"]] == []
    assert sorted(r["n"] for r in rows) == list(range(120))
