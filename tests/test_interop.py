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
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema

from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics, topic_name
from testbed.procs import ROOT, WorkerProc
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
