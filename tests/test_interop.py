"""The kit among the Kafka ecosystem's tools: the Confluent wire format and a real schema
registry (Apicurio Registry, the session stack's), on the real broker and Redis.

A producer outside the kit (confluent-kafka's ``AvroSerializer``: the bytes Java's
``KafkaAvroSerializer`` writes too) feeds a kit computation, and a consumer outside it
(``AvroDeserializer``) reads what the computation produced; schemas are deployed,
upgraded producer first, refused, listed and checked (``mw schemas``). The registry
failing: ``test_interop_registry.py``; the migration and the archive:
``test_interop_migration.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mwcore.serde.avro import SchemaRegistry
from mwcore.serde.framing import SCHEMA_ID_HEADER
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
from mwcore.transport.topics import ensure_topics, topic_name
from testbed.procs import ROOT, WorkerProc, wait_until
from testbed.topics import read_topic
from tests.support.interop import (
    COMPUTATION,
    NUMBER,
    confluent_env,
    last_sums,
    lines,
    mw,
    produce_numbers,
    produce_to,
    read_sums,
    registry_client,
    totals,
)

pytestmark = pytest.mark.interop
NUMBER_NAME = "mw.examples.Number"


def test_avro_serializer_in_avro_deserializer_out(stack: LocalStack, namespace: str, tmp_path: Path) -> None:
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    ensure_topics(stack.bootstrap, {numbers: 4})
    rows = [(f"k{i % 7}", i) for i in range(300)]
    produce_numbers(stack, numbers, rows)
    worker = WorkerProc(COMPUTATION, confluent_env(stack, namespace), tmp_path, "w0").start()
    try:
        out = read_sums(stack, sums, len(rows))
    finally:
        worker.terminate()
    assert {k: v["total"] for k, v in last_sums(out).items()} == totals(rows)
    assert len(out) == len(rows)  # once each
    # the subjects follow TopicNameStrategy, at the kit's compatibility level
    client = registry_client(stack)
    assert {f"{numbers}-value", f"{sums}-value"} <= set(client.get_subjects())
    assert client.get_compatibility(f"{sums}-value") == "FULL_TRANSITIVE"


def _id_in_header(payload: bytes, ctx: SerializationContext | None, schema_id: Any) -> bytes:
    """A ``schema.id.serializer`` for confluent-kafka's header variant with the id's prefix
    (``00`` and the id) in the header: what its ``dual_schema_id_deserializer`` reads, for
    registries that give no schema GUID for ``header_schema_id_serializer`` to write."""
    assert ctx is not None and isinstance(ctx.headers, list)
    ctx.headers.append((SCHEMA_ID_HEADER, schema_id.id_to_bytes()))
    return payload


def test_the_schema_id_in_a_header_as_confluent_kafka_writes_it(
    stack: LocalStack, namespace: str, tmp_path: Path
) -> None:
    """Values whose writer schema a ``__value_schema_id`` header names, the value the Avro
    body alone, are summed as the prefixed ones are; a header naming a schema GUID the
    registry does not serve, or holding junk, makes a dead letter saying so, which keeps
    the header beside the value as it came."""
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    dead = topic_name(namespace, "running_sum.dead-letters")
    ensure_topics(stack.bootstrap, {numbers: 4})
    serialize = AvroSerializer(registry_client(stack), NUMBER, conf={"schema.id.serializer": _id_in_header})
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    rows = [(f"k{i % 3}", i) for i in range(60)]
    for key, n in rows:
        headers: list[tuple[str, bytes]] = []
        value = serialize({"n": n}, SerializationContext(numbers, MessageField.VALUE, headers))
        producer.produce(numbers, value, key.encode(), headers=headers)
        if n == 30:
            body = value  # the body alone, named by nothing the registry serves, or by junk
            guid = uuid.uuid4()
            producer.produce(numbers, body, b"k0", headers=[(SCHEMA_ID_HEADER, b"\x01" + guid.bytes)])
            producer.produce(numbers, body, b"k0", headers=[(SCHEMA_ID_HEADER, b"\x07junk")])
    assert producer.flush(30) == 0
    worker = WorkerProc(COMPUTATION, confluent_env(stack, namespace), tmp_path, "w0").start()
    try:
        out = read_sums(stack, sums, len(rows))
        wait_until(lambda: len(read_topic(stack.bootstrap, dead)) == 2, 60, 0.5, "two dead letters")
    finally:
        worker.terminate()
    assert {k: v["total"] for k, v in last_sums(out).items()} == totals(rows)
    assert len(out) == len(rows)
    letters = {m.headers["mw-reason"]: m for m in read_topic(stack.bootstrap, dead)}
    guid_letter, junk_letter = letters[b"unknown_schema"], letters[b"undecodable"]
    assert f"schema GUID {guid}".encode() in guid_letter.headers["mw-error"], guid_letter.headers
    assert b"bad marker" in junk_letter.headers["mw-error"], junk_letter.headers
    for letter, named in ((guid_letter, b"\x01" + guid.bytes), (junk_letter, b"\x07junk")):
        assert letter.value == body and letter.headers[SCHEMA_ID_HEADER] == named  # as they came


def test_workers_deploying_the_same_new_subjects_at_once_agree(namespace: str, stack: LocalStack) -> None:
    """Several processes of one computation start together: each registers the same new
    subjects, at the kit's level, and all get the same ids (none stops on the others'
    doing it first)."""
    local = SchemaRegistry.from_directory(ROOT / "schemas")
    wanted = {topic_name(namespace, s): local.latest(NUMBER_NAME) for s in ("a", "b", "c")}
    assert stack.schema_registry_url is not None
    clients = [RegistryClient(RegistryAccess(stack.schema_registry_url)) for _ in range(6)]
    with ThreadPoolExecutor(len(clients)) as pool:
        deployed = list(pool.map(lambda c: c.deploy(wanted), clients))
    assert all(ids == deployed[0] for ids in deployed), deployed
    client = registry_client(stack)
    assert {client.get_compatibility(f"{t}-value") for t in wanted} == {"FULL_TRANSITIVE"}


def test_a_producer_first_upgrade_through_the_registry(
    stack: LocalStack, namespace: str, tmp_path: Path
) -> None:
    """A producer outside the kit moves to a new version of the input's schema (a field
    added, with a default) before the computation knows it: the worker learns the
    writer schema by id from the registry and reads it into its own version."""
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    ensure_topics(stack.bootstrap, {numbers: 4})
    old = [(f"k{i % 5}", i) for i in range(100)]
    produce_numbers(stack, numbers, old)
    worker = WorkerProc(COMPUTATION, confluent_env(stack, namespace), tmp_path, "w0").start()
    try:
        read_sums(stack, sums, len(old))
        newer = json.loads(NUMBER)
        newer["fields"].append({"name": "note", "type": "string", "default": ""})
        new = [(f"k{i % 5}", 1000 + i) for i in range(100)]
        produce_to(registry_client(stack), stack, numbers, new, json.dumps(newer), note="v2")
        out = read_sums(stack, sums, len(old) + len(new))
    finally:
        worker.terminate()
    assert len(registry_client(stack).get_versions(f"{numbers}-value")) == 2
    assert {k: v["total"] for k, v in last_sums(out).items()} == totals(old + new)


def test_an_incompatible_schema_is_refused_at_deploy(
    stack: LocalStack, namespace: str, tmp_path: Path
) -> None:
    """The output's subject already holds a schema the computation's cannot read (nor be
    read by): the worker stops at start with one line and exit code 2, and registers
    nothing (not even its input's subject)."""
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    client = registry_client(stack)
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
        env={**confluent_env(stack, namespace, MW_LOG_LEVEL="warning"), "PATH": "/usr/bin:/bin"},
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


def test_mw_schemas_list_and_check(stack: LocalStack, namespace: str, tmp_path: Path) -> None:
    numbers, sums = topic_name(namespace, "numbers"), topic_name(namespace, "sums")
    ensure_topics(stack.bootstrap, {numbers: 4})
    produce_numbers(stack, numbers, [("k", 1)])
    worker = WorkerProc(COMPUTATION, confluent_env(stack, namespace), tmp_path, "w0").start()
    try:
        read_sums(stack, sums, 1)
    finally:
        worker.terminate()
    listed = mw(stack, namespace, "list")
    assert listed.returncode == 0, listed.stderr
    by_subject = {line["subject"]: line for line in lines(listed)}
    assert set(by_subject) == {f"{topic_name(namespace, s)}-value" for s in ("numbers", "sums", "totals")}
    assert by_subject[f"{sums}-value"]["schema"] == "mw.examples.Sum"
    assert by_subject[f"{sums}-value"]["compatibility"] == "FULL_TRANSITIVE"
    checked = mw(stack, namespace, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert all(line["compatible"] for line in lines(checked))
    # a subject whose Sum the directory's cannot read (nor be read by): check says so
    client = registry_client(stack)
    elsewhere = f"{topic_name(namespace, 'elsewhere')}-value"
    client.set_compatibility(elsewhere, "FULL_TRANSITIVE")
    other = {
        "type": "record",
        "name": "Sum",
        "namespace": "mw.examples",
        "fields": [{"name": "x", "type": "int"}],
    }
    client.register_schema(elsewhere, Schema(json.dumps(other), "AVRO"))
    refused = mw(stack, namespace, "check")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert {line["subject"] for line in lines(refused) if not line["compatible"]} == {elsewhere}
