"""The kit among the Kafka ecosystem's tools: the Confluent wire format and a real schema
registry (Apicurio Registry, the session stack's), on the real broker and Redis.

A producer outside the kit (confluent-kafka's ``AvroSerializer``: the bytes Java's
``KafkaAvroSerializer`` writes too) feeds a kit computation, and a consumer outside it
(``AvroDeserializer``) reads what the computation produced.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer

from mwcore.api.signing import Signer
from mwcore.serde.avro import SchemaRegistry, decode_any
from mwcore.serde.framing import Framing, frame_of
from mwcore.tools.stack.localproc import free_port
from mwcore.tools.stack.localstack import LocalStack
from mwcore.tools.stack.schema_registry import ApicurioRegistry
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.transport.topics import ensure_topics, topic_name
from mwcore.transport.writer import SourceWriter
from testbed.hostile import dead_letter_reasons
from testbed.procs import ROOT, WorkerProc, wait_until, worker_env
from testbed.topics import read_topic

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
        **{
            "MW_WIRE": "confluent",
            "MW_SCHEMA_REGISTRY_URL": stack.schema_registry_url,
            "MW_LOG_LEVEL": "info",
            **extra,
        },
    )


def _produce_numbers(
    stack: LocalStack, topic: str, rows: list[tuple[str, int]], schema: str = NUMBER
) -> None:
    _produce_to(_registry(stack), stack, topic, rows, schema)


def _produce_to(
    client: SchemaRegistryClient,
    stack: LocalStack,
    topic: str,
    rows: list[tuple[str, int]],
    schema: str = NUMBER,
) -> None:
    """What a producer outside the kit writes: keys as strings, values by AvroSerializer."""
    serialize = AvroSerializer(client, schema)
    keys = StringSerializer()
    producer = Producer({"bootstrap.servers": stack.bootstrap, "enable.idempotence": True})
    for key, n in rows:
        ctx = SerializationContext(topic, MessageField.VALUE)
        producer.produce(topic, serialize({"n": n}, ctx), keys(key))
    assert producer.flush(30) == 0


def _read_sums(
    stack: LocalStack,
    topic: str,
    expected: int,
    timeout: float = 90,
    client: SchemaRegistryClient | None = None,
) -> list[dict[str, Any]]:
    """What a consumer outside the kit reads: AvroDeserializer's values, in order."""
    deserialize = AvroDeserializer(client or _registry(stack))
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


@pytest.fixture
def own_registry(tmp_path: Path) -> Iterator[ApicurioRegistry]:
    """A registry of the test's own, which it may stop and start (its schemas in its
    directory, as the session's)."""
    registry = ApicurioRegistry(directory=tmp_path / "registry").start()
    try:
        yield registry
    finally:
        registry.stop()


def _framed(schema_id: int, n: int) -> bytes:
    """A Number framed by hand (what any Confluent serializer writes for it)."""
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(json.loads(NUMBER)), {"n": n})
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


def test_the_registry_down_at_start_stops_the_worker_with_one_line(
    stack: LocalStack, namespace: str, tmp_path: Path
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mwcore", "run", COMPUTATION],
        env={
            **_confluent_env(stack, namespace, MW_LOG_LEVEL="warning", MW_SCHEMA_REGISTRY_URL=closed),
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
    env = _confluent_env(stack, namespace, MW_SCHEMA_REGISTRY_URL=url)
    first = [(f"k{i % 3}", i) for i in range(50)]
    client = SchemaRegistryClient({"url": url, "timeout": 10})
    _produce_to(client, stack, numbers, first)
    ids = {s: client.get_latest_version(s).schema_id for s in (f"{numbers}-value",)}
    worker = WorkerProc(COMPUTATION, env, tmp_path, "w0").start()
    try:
        _read_sums(stack, sums, len(first), client=client)
        own_registry.stop()
        own_registry.start()
        again = SchemaRegistryClient({"url": url, "timeout": 10})  # nothing cached
        assert {s: again.get_latest_version(s).schema_id for s in ids} == ids
        assert f"{sums}-value" in again.get_subjects()
        second = [(f"k{i % 3}", 100 + i) for i in range(50)]
        _produce_to(again, stack, numbers, second)
        out = _read_sums(stack, sums, len(first) + len(second), client=again)
    finally:
        worker.terminate()
    final: dict[str, int] = {}
    for value in out:
        final[value["key"]] = max(final.get(value["key"], 0), value["total"])
    assert final == _totals(first + second)


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
    _produce_to(client, stack, numbers, [("k", 1)])
    known = int(client.get_latest_version(f"{numbers}-value").schema_id or 0)
    env = _confluent_env(stack, namespace, MW_SCHEMA_REGISTRY_URL=own_registry.url)
    worker = WorkerProc(COMPUTATION, env, tmp_path, "w0").start()
    try:
        _read_sums(stack, sums, 1, client=client)
        own_registry.stop()
        producer = Producer({"bootstrap.servers": stack.bootstrap})
        producer.produce(numbers, _framed(known, 2), b"k")
        producer.produce(numbers, _framed(known + 1000, 5), b"k")  # an id it never saw
        producer.produce(numbers, _framed(known, 3), b"k")
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
    assert letter.value == _framed(known + 1000, 5)  # as it came
    sum_schema = fastavro.parse_schema(json.loads((ROOT / "schemas" / "examples" / "sum.avsc").read_text()))
    values: list[Any] = [
        fastavro.schemaless_reader(io.BytesIO(m.value[5:]), sum_schema, None)
        for m in read_topic(stack.bootstrap, sums)
    ]
    assert [v["total"] for v in values] == [1, 3, 6]


def _mw(stack: LocalStack, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
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


def _lines(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _decoded(stack: LocalStack, topic: str) -> dict[bytes, dict[str, Any]]:
    """Every value of ``topic`` in either framing, by record id (a copy re-sent after a
    takeover has its original's id): what a reader that reads both sees."""
    assert stack.schema_registry_url is not None
    local = SchemaRegistry.from_directory(ROOT / "schemas")
    local.use_ids(RegistryClient(RegistryAccess(stack.schema_registry_url)))
    local.use_source(SchemaTopic(stack.bootstrap, topic.split(".")[0]))
    return {m.id: decode_any(local, m.value)[1] for m in read_topic(stack.bootstrap, topic)}


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
        return worker_env(stack.bootstrap, stack.redis_url, namespace, **base, **extra)

    def write(writer: SourceWriter, count: int) -> None:
        for _ in range(count):
            key, n = f"k{len(rows) % 6}", len(rows) + 1
            writer.write(key, {"n": n}, 1_700_000_000_000 + len(rows))
            rows.append((key, n))
        writer.flush()

    def summed() -> bool:
        return len(_decoded(stack, sums)) >= len(rows)

    old_writer = SourceWriter(
        stack.bootstrap, registry, numbers, "mw.examples.Number", schemas, signer=Signer(secret, "write")
    )
    workers = [WorkerProc(COMPUTATION, env(MW_MAC_V1="write"), tmp_path, "a").start()]  # as before
    write(old_writer, 120)
    wait_until(summed, 90, 0.5, "the old pipeline's sums")
    # 1. the writer schemas into the registry
    imported = _mw(stack, namespace, "import")
    assert imported.returncode == 0, imported.stderr
    assert {line["subject"] for line in _lines(imported)} >= {f"{numbers}-value", f"{sums}-value"}
    # 2. readers of both framings and both MACs, still writing as before: rolled in
    workers.append(
        WorkerProc(COMPUTATION, env(MW_MAC_V1="write", MW_WIRE_READ_ALSO="confluent"), tmp_path, "b").start()
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
    out = _decoded(stack, sums)
    framings = {frame_of(m.value).wire for m in read_topic(stack.bootstrap, sums)}  # type: ignore[union-attr]
    assert framings == {"single-object", "confluent"}
    last: dict[str, dict[str, Any]] = {}
    for value in out.values():
        if value["count"] > last.get(value["key"], {"count": 0})["count"]:
            last[value["key"]] = value
    assert {k: v["total"] for k, v in last.items()} == _totals(rows)
    per_key: dict[str, int] = defaultdict(int)
    for key, _ in rows:
        per_key[key] += 1
    assert {k: v["count"] for k, v in last.items()} == per_key  # each record once
    assert len(out) == len(rows)
    assert dead_letter_reasons(stack.bootstrap, namespace, "running_sum") == {}


def test_mw_schemas_list_and_check(stack: LocalStack, namespace: str, tmp_path: Path) -> None:
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    ensure_topics(stack.bootstrap, {numbers: 4})
    _produce_numbers(stack, numbers, [("k", 1)])
    worker = WorkerProc(COMPUTATION, _confluent_env(stack, namespace), tmp_path, "w0").start()
    try:
        _read_sums(stack, sums, 1)
    finally:
        worker.terminate()
    listed = _mw(stack, namespace, "list")
    assert listed.returncode == 0, listed.stderr
    by_subject = {line["subject"]: line for line in _lines(listed)}
    assert set(by_subject) == {f"{topic_name(namespace, s)}-value" for s in ("numbers", "sums", "totals")}
    assert by_subject[f"{sums}-value"]["schema"] == "mw.examples.Sum"
    assert by_subject[f"{sums}-value"]["compatibility"] == "FULL_TRANSITIVE"
    checked = _mw(stack, namespace, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert all(line["compatible"] for line in _lines(checked))
    # a subject whose Sum the directory's cannot read (nor be read by): check says so
    client = _registry(stack)
    elsewhere = f"{topic_name(namespace, 'elsewhere')}-value"
    client.set_compatibility(elsewhere, "FULL_TRANSITIVE")
    other = {
        "type": "record",
        "name": "Sum",
        "namespace": "mw.examples",
        "fields": [{"name": "x", "type": "int"}],
    }
    client.register_schema(elsewhere, Schema(json.dumps(other), "AVRO"))
    refused = _mw(stack, namespace, "check")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert {line["subject"] for line in _lines(refused) if not line["compatible"]} == {elsewhere}


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
        stack.bootstrap, registry, numbers, "mw.examples.Number", SchemaTopic(stack.bootstrap, namespace)
    )
    for i in range(50):
        old.write(f"k{i % 4}", {"n": i}, 1_700_000_000_000 + i)
    old.flush()
    newer = json.loads(NUMBER)
    newer["fields"].append({"name": "note", "type": "string", "default": ""})
    serialize = AvroSerializer(_registry(stack), json.dumps(newer))  # a producer outside the kit
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
