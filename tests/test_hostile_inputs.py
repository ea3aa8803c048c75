"""No single record on the schemas topic or an input topic stops, stalls or corrupts a
pipeline (semantics I-12), on a real broker and Redis, while a running sum works:

- the schemas topic: junk (not JSON, nested too deep, a bad key, oversized) stops no
  producer and no reader; a document that is not its fingerprint's (a forged one under
  a real fingerprint) is never used, and two under one fingerprint are a conflict whose
  records are dead letters; a schema whose arrays hold nothing is refused, and a record
  claiming 2**62 such items is a dead letter in bounded time;
- input records: keys, timestamps and user headers out of the kit's bounds are dead letters, a
  stream of unknown writer schemas does not stall a worker, and a record whose header
  name is not UTF-8 (written through librdkafka's C API) counts like any other;
- the native core's own faults: a panic in its per-record code (forced for one key's
  records, ``MW_PANIC_KEY``) makes that record a dead letter (``internal_error``) and
  the worker goes on, exact; committed offsets whose metadata was not UTF-8 (what any
  client may commit for the worker's group) are read, on either core.

The schemas topic and fingerprints are the single-object framing's: the streams here
are framed so whatever the suite's framing. Hostile registry ids and framings are
``tests/test_hostile.py``'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mwcore.limits import MAX_HEADERS
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.wire import _write_long
from mwcore.tools.stack.localproc import free_port
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.schema_topic import COMPACTED, schemas_topic
from mwcore.transport.topics import admin_config, ensure_topics, topic_name
from testbed.hostile import dead_letter_reasons, produce_raw, rejections
from testbed.native import requires_native
from testbed.procs import WorkerProc, wait_until, worker_env
from testbed.raw_kafka import commit_with_metadata, produce_with_headers
from tests.conftest import ROOT

pytestmark = pytest.mark.hostile


NUMBER_V2 = {
    "type": "record",
    "name": "Number",
    "namespace": "mw.examples",
    "version": 2,
    "fields": [{"name": "n", "type": "long"}, {"name": "unit", "type": "string", "default": "one"}],
}


def _writer(doc: dict[str, Any]) -> AvroSerde:
    """A producer's serde of ``doc``, a version of ``mw.examples.Number`` the workers lack."""
    reg = SchemaRegistry.from_directory(ROOT / "schemas")
    reg.add(doc)
    return AvroSerde(reg, "mw.examples.Number")


def _varint(v: int) -> bytes:
    """Avro's zig-zag varint of ``v``, as the codecs write it."""
    out = bytearray()
    _write_long(out, v)
    return bytes(out)


def _schemas(stack: LocalStack, namespace: str) -> str:
    """The namespace's schemas topic, made as the kit makes it (it may not exist yet)."""
    topic = schemas_topic(namespace)
    ensure_topics(stack.bootstrap, {topic: 1}, config=COMPACTED)
    return topic


def _schema_record(doc: Any) -> tuple[bytes, bytes]:
    """``doc`` as a record of the schemas topic, under the fingerprint of ``doc``'s own
    canonical form (as a producer publishes it)."""
    import struct

    from fastavro import parse_schema
    from fastavro.schema import fingerprint, to_parsing_canonical_form

    fp = int(fingerprint(to_parsing_canonical_form(parse_schema(doc, named_schemas={})), "CRC-64-AVRO"), 16)
    return struct.pack("<Q", fp), json.dumps(doc).encode()


@dataclass
class Sums:
    """A running sum worker of ``numbers``, and what it makes of what is written there."""

    stack: LocalStack
    registry: SchemaRegistry
    namespace: str
    log_dir: Path
    port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)  # the worker's, besides the stack's

    def __post_init__(self) -> None:
        env = worker_env(
            self.stack,
            self.namespace,
            MW_METRICS_PORT=str(self.port),
            MW_WIRE="single-object",
            **self.env,
        )
        self.worker = WorkerProc("mwcore.examples.running_sum:RunningSum", env, self.log_dir, "sum")
        self.numbers = topic_name(self.namespace, "numbers")
        self.serde = AvroSerde(self.registry, "mw.examples.Number")

    def start(self) -> Sums:
        self.worker.start()
        wait_until(lambda: self.worker.ready, 60, what="the worker to join")
        return self

    def write(
        self,
        values: list[bytes],
        key: bytes = b"k",
        timestamp: int = 0,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        records = [(key, v) for v in values]
        produce_raw(self.stack.bootstrap, self.numbers, records, headers, timestamp, True)

    def legit(self, *ns: int, key: bytes = b"k") -> None:
        self.write([self.serde.encode({"n": n}) for n in ns], key)

    def totals(self) -> dict[str, int]:
        from testbed.topics import read_topic

        out = AvroSerde(self.registry, "mw.examples.Sum")
        last: dict[str, tuple[int, int]] = {}
        for m in read_topic(self.stack.bootstrap, topic_name(self.namespace, "sums")):
            s = out.decode(m.value)
            if s["count"] >= last.get(s["key"], (0, 0))[0]:
                last[s["key"]] = (s["count"], s["total"])
        return {k: total for k, (_, total) in last.items()}

    def dead(self) -> dict[str, int]:
        return dict(dead_letter_reasons(self.stack.bootstrap, self.namespace, "running_sum"))

    def stop(self) -> None:
        self.worker.terminate()


def test_junk_on_the_schemas_topic_stops_no_producer_and_no_reader(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """Junk on the schemas topic before a worker starts (it reads the topic to publish
    its own schemas): not JSON, nested too deep, a key that is not a fingerprint, a
    valid but unnamed schema under its own fingerprint (and a record written with it).
    The worker starts, skips and counts the junk, dead-letters the record it cannot
    read, and sums the rest."""
    unnamed = {"type": "array", "items": "long"}
    key, doc = _schema_record(unnamed)
    produce_raw(
        stack.bootstrap,
        _schemas(stack, namespace),
        [(b"\x00" * 8, b"not json"), (b"\x01" * 8, b"[" * 5000 + b"]" * 5000), (b"short", b"{}"), (key, doc)],
    )
    sums = Sums(stack, registry, namespace, log_dir).start()
    try:
        unnamed_record = b"\xc3\x01" + key + _varint(1) + _varint(1) + b"\x00"  # [1], with the unnamed schema
        sums.write([unnamed_record])
        sums.legit(1, 2, 3)
        wait_until(lambda: sums.totals().get("k") == 6, 60, 0.3, "the sum of the readable records")
        assert sums.dead() == {"undecodable": 1}, sums.dead()
        assert {"not_json", "bad_key"} <= set(rejections(sums.port)), rejections(sums.port)
        assert sums.worker.alive
    finally:
        sums.stop()


def test_a_schema_document_that_is_not_its_fingerprint_s_is_never_used(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """A producer upgraded first (Number v2, one field more) and a forged document under
    v2's fingerprint with the fields swapped: the forged one is rejected, and a record of
    v2 is read with the real one, never the forged one; where both a document and another
    with the same fingerprint (a default changed) are there, the fingerprint's records
    are dead letters naming the conflict."""
    writer = _writer(NUMBER_V2)
    key, real = _schema_record(writer.schema.document)
    swapped = {**writer.schema.document, "fields": writer.schema.document["fields"][::-1]}
    produce_raw(stack.bootstrap, _schemas(stack, namespace), [(key, json.dumps(swapped).encode())])
    sums = Sums(stack, registry, namespace, log_dir).start()
    try:
        sums.write([writer.encode({"n": 5, "unit": "kg"})])  # unknown to the worker; only a forged doc
        sums.legit(1)
        wait_until(lambda: sums.totals().get("k") == 1, 60, 0.3, "the legit record")
        assert sums.dead() == {"unknown_schema": 1}, sums.dead()  # not decoded with the fields swapped
        produce_raw(stack.bootstrap, _schemas(stack, namespace), [(key, real)])
        sums.write([writer.encode({"n": 5, "unit": "kg"})], key=b"v2")
        wait_until(lambda: sums.totals().get("v2") == 5, 60, 0.3, "the record read with the real document")
        other_default = {**writer.schema.document}
        other_default["fields"] = [
            writer.schema.document["fields"][0],
            {**writer.schema.document["fields"][1], "default": "two"},
        ]
        produce_raw(stack.bootstrap, _schemas(stack, namespace), [(key, json.dumps(other_default).encode())])
        assert "not_its_schema" in rejections(sums.port)
    finally:
        sums.stop()
    fresh = Sums(stack, registry, namespace, log_dir)  # a new reader meets both documents
    fresh.worker.name = "sum2"
    fresh.start()
    try:
        fresh.write([writer.encode({"n": 7, "unit": "kg"})], key=b"v2b")
        wait_until(lambda: fresh.dead().get("schema_conflict", 0) >= 1, 60, 0.3, "the conflict's dead letter")
        assert "v2b" not in fresh.totals()
    finally:
        fresh.stop()


def test_a_schema_whose_arrays_hold_nothing_and_a_record_claiming_2_62_items(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """A writer schema with an ``array<null>`` field (under its own fingerprint) and a
    30-byte record of it whose block count is 2**62: the schema is refused, the record is
    a dead letter at once, and the worker goes on."""
    nothing = {
        **NUMBER_V2,
        "fields": [
            NUMBER_V2["fields"][0],
            {"name": "z", "type": {"type": "array", "items": "null"}, "default": []},
        ],
    }
    key, doc = _schema_record(nothing)
    produce_raw(stack.bootstrap, _schemas(stack, namespace), [(key, doc)])
    sums = Sums(stack, registry, namespace, log_dir).start()
    try:
        sums.write([b"\xc3\x01" + key + _varint(1) + _varint(2**62) + b"\x00"])
        sums.legit(4)
        wait_until(lambda: sums.totals().get("k") == 4, 60, 0.3, "the legit record")
        assert sums.dead() == {"unknown_schema": 1}, sums.dead()
        assert "not_its_schema" in rejections(sums.port)
    finally:
        sums.stop()


def _any_timestamp(bootstrap: str, topic: str) -> None:
    """Let ``topic`` take records dated any time (the broker's default refuses those more
    than an hour ahead; an operator may lift that, and older brokers did not have it)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entry = ConfigEntry(
        "message.timestamp.after.max.ms",
        str(2**63 - 1),
        incremental_operation=AlterConfigOpType.SET,
    )
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient(admin_config(bootstrap))
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_keys_timestamps_and_headers_out_of_bounds_are_dead_letters(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """A 70,000-byte key (it wedged a computation that sets timers), a timestamp near
    2**62 and one past the year 9999, user headers one too many or of 70,000 bytes: dead
    letters with their reasons; the rest counts (headers at their bounds too)."""
    sums = Sums(stack, registry, namespace, log_dir).start()
    try:
        value = sums.serde.encode({"n": 1})
        _any_timestamp(stack.bootstrap, sums.numbers)  # as a topic may be configured
        sums.write([value], key=b"q" * 70_000)
        sums.write([value], timestamp=2**62)
        sums.write([value], timestamp=253_402_300_800_000)
        sums.write([value], headers=[(f"h{i}", b"") for i in range(MAX_HEADERS + 1)])
        sums.write([value], headers=[("big", bytes(70_000))])
        sums.write([value], headers=[(f"h{i}", b"") for i in range(MAX_HEADERS)])  # at the bound: counts
        sums.legit(2, 3)
        wait_until(lambda: sums.totals().get("k") == 6, 60, 0.3, "the legit records")
        assert sums.dead() == {"key_too_long": 1, "bad_timestamp": 2, "headers_too_large": 2}, sums.dead()
        assert sums.worker.alive
    finally:
        sums.stop()


def test_records_of_unknown_writer_schemas_do_not_stall_a_worker(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """2,000 records, each with a fingerprint nobody published, among legit ones: each
    used to hold the worker's loop a second. They are dead letters, and the legit
    records' sum is there within a minute."""
    import random

    sums = Sums(stack, registry, namespace, log_dir).start()
    try:
        rng = random.Random(3)
        junk = [b"\xc3\x01" + rng.randbytes(8) + b"\x02" for _ in range(2000)]
        sums.write(junk[:1000])
        sums.legit(1, 2)
        sums.write(junk[1000:])
        sums.legit(3)
        wait_until(lambda: sums.totals().get("k") == 6, 60, 0.3, "the legit records past the junk")
        wait_until(
            lambda: sums.dead().get("unknown_schema", 0) == 2000, 60, 0.5, "every junk record's dead letter"
        )
    finally:
        sums.stop()


def test_a_header_name_that_is_not_utf8_stops_no_worker(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """Kafka checks nothing of a header's name. On the native consumer (the default) such
    a record is a record like any other: it counts, and the worker goes on. (On
    confluent-kafka's consumer, the Python core's (``MW_CORE=python``), it is not contained:
    confluent-kafka fails on its headers; docs/design.md, "Hostile input".)"""
    sums = Sums(stack, registry, namespace, log_dir).start()
    try:
        sums.legit(1)
        value = sums.serde.encode({"n": 10})
        produce_with_headers(stack.bootstrap, sums.numbers, b"k", value, [(b"\xff\xfe", b"x")])
        produce_with_headers(stack.bootstrap, sums.numbers, b"k", value, [(b"ok", b""), (b"\xc3(", b"")])
        sums.legit(100)
        wait_until(lambda: sums.totals().get("k") == 121, 60, 0.3, "every record, the odd ones too")
        assert sums.worker.alive
        assert sums.dead() == {}
    finally:
        sums.stop()


@requires_native
def test_a_panic_in_per_record_native_code_is_a_dead_letter_and_the_worker_goes_on(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """A bug of the native core's, met by one record (a panic before user code runs on
    a record of key ``boom``, test plumbing): that record is a dead letter
    ``internal_error``, logged as an error; what its call changed is undone; the other
    records, of its key's neighbours in the same chunks, are exact, and the worker
    lives."""
    sums = Sums(stack, registry, namespace, log_dir, env={"MW_CORE": "native", "MW_PANIC_KEY": "boom"})
    sums.start()
    try:
        sums.legit(1, 2)
        sums.legit(40, key=b"boom")
        sums.legit(3)
        sums.legit(5, 6, key=b"other")
        sums.legit(4)
        wait_until(lambda: sums.totals() == {"k": 10, "other": 11}, 60, 0.3, "the records around the panic")
        wait_until(lambda: sums.dead() == {"internal_error": 1}, 60, 0.3, "the panic's dead letter")
        assert sums.worker.alive
        logs = sums.worker.logs()
        assert '"event": "internal_error"' in logs and '"level": "error"' in logs
        assert "a panic in the native core" in logs and "MW_PANIC_KEY" in logs
    finally:
        sums.stop()


@pytest.mark.parametrize("core", [pytest.param("native", marks=requires_native), "python"])
def test_offset_metadata_that_is_not_utf8_is_read(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, core: str
) -> None:
    """Any client may commit offsets for the worker's group, with metadata of any bytes.
    (Apache Kafka keeps them as a string, bytes that are not UTF-8 replaced; a broker
    that keeps them as they came hands them back so: the native consumer reads those
    too, ``transport/commits.rs``'s unit tests.) The worker reads the group's committed
    offsets when it takes an interval over (the commit witness): such metadata is no
    witness of its, and the worker goes on, exact."""
    from mwcore.examples.running_sum import RunningSum
    from mwcore.runtime.layout import Layout

    comp = RunningSum()
    numbers = topic_name(namespace, "numbers")
    ensure_topics(stack.bootstrap, {numbers: comp.partitions})
    group = Layout.of(comp, namespace).group
    for partition in range(comp.partitions):
        commit_with_metadata(
            stack.bootstrap, group, numbers, partition, 0, b"\xff\xfe\x00mw:" + bytes([partition])
        )
    sums = Sums(stack, registry, namespace, log_dir, env={"MW_CORE": core}).start()
    try:
        sums.legit(1, 2, 3)
        wait_until(lambda: sums.totals() == {"k": 6}, 60, 0.3, "the records")
        assert sums.worker.alive and sums.dead() == {}
    finally:
        sums.stop()
