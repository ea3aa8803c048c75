"""No single record stops, stalls or corrupts a pipeline (semantics I-12), on a real broker
and Redis: records anyone who can write a topic may write, sent to the topics the kit
reads, while the pipeline runs. Where a protection can be switched off (the pipeline
secret, ``MW_ID_SECRET``), a negative control shows the check catching the attack.

- the watermark topic: junk (not JSON, nested too deep, fields missing or of the wrong
  type, a key that is not its name) is skipped and counted; workers, the authority
  (restarted over it) and ``mw watermarks`` go on, no timer fires early;
- a well-formed watermark record forged under the computation's own name: with the
  secret it is rejected (not signed by the authority); without it (the control) the
  computation's timers fire early;
- record ids: with the secret, a record forged under a real record's id before it is a
  ``bad_id`` dead letter and the real record counts; without it (the control) the
  forged one suppresses the real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mwcore.api import ids
from mwcore.api.signing import MAC_HEADER, UNSIGNED, Signer
from mwcore.injector.injector import Injector
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.tools.stack.localproc import free_port
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.schema_topic import COMPACTED, schemas_topic
from mwcore.transport.topics import admin_config, ensure_topics, topic_name
from mwcore.transport.watermark_topic import WatermarkFeed, watermark_topic
from mwcore.watermarks.published import Watermarks
from testbed.hostile import SECRET, dead_letter_reasons, produce_raw, rejections
from testbed.procs import WorkerProc, wait_until, worker_env
from tests.conftest import ROOT
from tests.support.watermarks import authority, injector, windows

pytestmark = pytest.mark.hostile

FAR = 2**62  # a watermark far past any record: every timer would fire


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "logs"
    d.mkdir()
    yield d


@dataclass
class Windows:
    """A windowed count on the authority's watermark, and its injector."""

    stack: LocalStack
    registry: SchemaRegistry
    namespace: str
    log_dir: Path
    secret: str | None
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        extra = {"MW_ID_SECRET": self.secret} if self.secret else {}
        self.signer = Signer(self.secret) if self.secret else UNSIGNED
        self.auth = authority(self.stack, self.namespace, self.log_dir, **extra).start()
        env = worker_env(
            self.stack.bootstrap,
            self.stack.redis_url,
            self.namespace,
            MW_WATERMARK="authority",
            MW_REPORT_INTERVAL_MS="50",
            MW_METRICS_PORT=str(self.port),
            **extra,
        )
        self.worker = WorkerProc("tests.support.windows:WindowCount", env, self.log_dir, "windower").start()
        self.inj: Injector = injector(self.stack, self.registry, self.namespace, signer=self.signer)
        self.feed = WatermarkFeed(self.stack.bootstrap, self.namespace, self.signer)

    def input_watermark(self) -> int:
        self.feed.poll(0.1)
        wm = self.feed.get("window_count")
        return -1 if wm is None else wm.input

    def send(self, *timestamps: int, advance: int) -> None:
        for ts in timestamps:
            self.inj.send("events", "k", {"n": 1}, ts)
        self.inj.advance(advance)
        self.inj.flush()

    def start(self) -> None:
        """A first window out, and one record pending in the window from 5000."""
        wait_until(lambda: self.worker.ready, 60, what="the windower to join")
        self.send(*range(1000, 2000, 100), advance=2000)
        wait_until(lambda: self.windows(), 60, 0.3, "the first window")
        self.send(5100, advance=5150)
        wait_until(lambda: self.input_watermark() >= 5150, 30, 0.1, "the watermark to reach 5150")

    def finish(self) -> list[dict[str, Any]]:
        """A second record in the window from 5000, then the watermark past it."""
        self.send(5200, advance=7000)
        wait_until(lambda: any(w["start"] == 5000 for w in self.windows()), 60, 0.3, "the window from 5000")
        return self.windows()

    def windows(self) -> list[dict[str, Any]]:
        return windows(self.stack, self.registry, self.namespace)

    def close(self) -> None:
        self.inj.close()
        self.feed.close()
        for p in (self.worker, self.auth):
            p.terminate()


def _forged_watermark(name: str) -> bytes:
    return Watermarks(name, "computation", FAR, FAR, FAR, FAR, 1).encode()


def _early(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [w for w in found if w["early"]]


def test_junk_on_the_watermark_topic_is_skipped_and_counted(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """Junk written to the watermark topic while the pipeline runs: the worker skips and
    counts it, the authority restarted over it starts and publishes, ``mw watermarks``
    shows the watermarks, and no timer fires early."""
    run = Windows(stack, registry, namespace, log_dir, secret=None)
    try:
        run.start()
        junk: list[tuple[bytes | None, bytes | None]] = [
            (b"window_count", b"not json"),
            (b"window_count", b"[" * 3000 + b"]" * 3000),
            (b"window_count", json.dumps({"kind": "computation", "input": 9}).encode()),
            (
                b"window_count",
                json.dumps({"name": "window_count", "kind": "computation", "input": "9"}).encode(),
            ),
            (b"x", _forged_watermark("window_count")),  # its key is not its name
            (b"", b"{}"),  # (no key at all the broker refuses on a compacted topic)
        ]
        produce_raw(stack.bootstrap, watermark_topic(namespace), junk)
        wait_until(lambda: sum(rejections(run.port).values()) >= len(junk), 30, 0.3, "the worker to skip it")
        run.auth.kill()
        run.auth.start(MW_AUTHORITY_BLOCK_MS="10")  # reads the topic at start: the junk too
        shown = subprocess.run(
            [sys.executable, "-m", "mwcore", "watermarks", "--once", "--namespace", namespace],
            env={**os.environ, "MW_BOOTSTRAP": stack.bootstrap},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        found = run.finish()
        assert run.worker.alive and run.auth.alive, run.auth.logs()[-2000:]
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout.splitlines()[-1])  # the watermarks, as JSON
        counted = rejections(run.port)
        assert {"not_json", "bad_name", "out_of_range", "key_mismatch"} <= set(counted), counted
        assert _early(found) == [], found
        assert {(w["start"], w["count"]) for w in found} == {(1000, 10), (5000, 2)}
    finally:
        run.close()


def _forged_watermark_scenario(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, secret: str | None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """A watermark record in the right shape under the computation's own name, claiming
    its input is complete: the windows that come out, and what the worker rejected."""
    run = Windows(stack, registry, namespace, log_dir, secret)
    try:
        run.start()
        produce_raw(
            stack.bootstrap,
            watermark_topic(namespace),
            [(b"window_count", _forged_watermark("window_count"))],
        )

        def met() -> bool:  # refused, or taken (the window from 5000 out with one record)
            return "bad_mac" in rejections(run.port) or any(w["start"] == 5000 for w in run.windows())

        wait_until(met, 30, 0.2, "the worker to meet the forged watermark")
        found = run.finish()
        return found, dict(rejections(run.port))
    finally:
        run.close()


def test_a_forged_watermark_is_refused_with_the_pipeline_secret(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    found, rejected = _forged_watermark_scenario(stack, registry, namespace, log_dir, SECRET)
    assert rejected.get("bad_mac", 0) >= 1, rejected
    assert _early(found) == [], found
    assert {(w["start"], w["count"]) for w in found} == {(1000, 10), (5000, 2)}


@pytest.mark.negative_control
def test_negative_control_without_the_secret_a_forged_watermark_fires_timers_early(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """The same record without a pipeline secret: nothing tells it from the authority's,
    the window from 5000 fires with one record and the second comes after it."""
    found, _ = _forged_watermark_scenario(stack, registry, namespace, log_dir, None)
    assert _early(found), found


def _forged_id_scenario(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, secret: str | None
) -> tuple[dict[str, Any], dict[str, int]]:
    """A record forged under the id a real record will have (ids are predictable),
    written before it: the running sum's totals, and the dead letters by reason."""
    extra = {"MW_ID_SECRET": secret} if secret else {}
    signer = Signer(secret) if secret else UNSIGNED
    numbers = topic_name(namespace, "numbers")
    env = worker_env(stack.bootstrap, stack.redis_url, namespace, **extra)
    worker = WorkerProc("mwcore.examples.running_sum:RunningSum", env, log_dir, "sum").start()
    serde = AvroSerde(registry, "mw.examples.Number")
    try:
        wait_until(lambda: worker.ready, 60, what="the worker to join")
        real_id = ids.derive(b"a source the attacker can predict", 1)
        forged_headers = [("mw-id", real_id)]  # no MAC: it cannot make one
        produce_raw(stack.bootstrap, numbers, [(b"k", serde.encode({"n": 999}))], forged_headers)
        real_headers = [("mw-id", real_id)]
        if signer.enabled:
            real_headers.append((MAC_HEADER, signer.sign_id(real_id)))
        produce_raw(stack.bootstrap, numbers, [(b"k", serde.encode({"n": 1}))], real_headers)
        produce_raw(stack.bootstrap, numbers, [(b"k", serde.encode({"n": 10}))], _signed(signer))

        def sums() -> list[dict[str, Any]]:
            out = AvroSerde(registry, "mw.examples.Sum")
            from testbed.topics import read_topic

            return [out.decode(m.value) for m in read_topic(stack.bootstrap, topic_name(namespace, "sums"))]

        wait_until(lambda: any(s["total"] in (11, 1009) for s in sums()), 60, 0.3, "the last record's sum")
        last = max(sums(), key=lambda s: s["count"])
        return last, dict(dead_letter_reasons(stack.bootstrap, namespace, "running_sum"))
    finally:
        worker.terminate()


def _signed(signer: Signer) -> list[tuple[str, bytes]]:
    rid = ids.random_id()
    return [("mw-id", rid), *([(MAC_HEADER, signer.sign_id(rid))] if signer.enabled else [])]


def test_a_forged_record_id_is_a_dead_letter_and_the_real_record_counts(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    last, dead = _forged_id_scenario(stack, registry, namespace, log_dir, SECRET)
    assert last == {"key": "k", "total": 11, "count": 2}, last  # the real 1 and 10, not 999
    assert dead.get("bad_id") == 1, dead


@pytest.mark.negative_control
def test_negative_control_without_the_secret_a_forged_id_suppresses_the_real_record(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    last, dead = _forged_id_scenario(stack, registry, namespace, log_dir, None)
    assert last["total"] == 1009, last  # the forged 999 counted, the real 1 dropped as seen
    assert "bad_id" not in dead


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
    """Avro's zig-zag varint of ``v``."""
    z, out = (v << 1) ^ (v >> 63), bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
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

    def __post_init__(self) -> None:
        env = worker_env(
            self.stack.bootstrap, self.stack.redis_url, self.namespace, MW_METRICS_PORT=str(self.port)
        )
        self.worker = WorkerProc("mwcore.examples.running_sum:RunningSum", env, self.log_dir, "sum")
        self.numbers = topic_name(self.namespace, "numbers")
        self.serde = AvroSerde(self.registry, "mw.examples.Number")

    def start(self) -> Sums:
        self.worker.start()
        wait_until(lambda: self.worker.ready, 60, what="the worker to join")
        return self

    def write(self, values: list[bytes], key: bytes = b"k", timestamp: int = 0) -> None:
        produce_raw(self.stack.bootstrap, self.numbers, [(key, v) for v in values], None, timestamp, True)

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


def test_keys_and_timestamps_out_of_bounds_are_dead_letters(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """A 70,000-byte key (it wedged a computation that sets timers), a timestamp near
    2**62 and one past the year 9999: dead letters with their reasons; the rest counts."""
    sums = Sums(stack, registry, namespace, log_dir).start()
    try:
        value = sums.serde.encode({"n": 1})
        _any_timestamp(stack.bootstrap, sums.numbers)  # as a topic may be configured
        sums.write([value], key=b"q" * 70_000)
        sums.write([value], timestamp=2**62)
        sums.write([value], timestamp=253_402_300_800_000)
        sums.legit(2, 3)
        wait_until(lambda: sums.totals().get("k") == 5, 60, 0.3, "the legit records")
        assert sums.dead() == {"key_too_long": 1, "bad_timestamp": 2}, sums.dead()
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
