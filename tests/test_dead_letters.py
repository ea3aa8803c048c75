"""Dead letters: bad records go to the dead-letter topic with their reason; the rest go on.

Four kinds of bad record are mixed into good traffic: bytes that are not Avro, Avro
written with a schema the registry does not know, a record without a key, and a
record whose processing raises. The worker is SIGKILLed once on the way. Each bad
record lands in the dead-letter topic exactly once (after id dedup) with headers
naming its source topic, partition, offset and error; every good record is processed
exactly once.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mwcore.localstack import LocalStack
from mwcore.serde import AvroSerde, SchemaRegistry
from mwcore.source import SourceWriter
from mwcore.transport import topic_name
from tests.conftest import ROOT
from tests.support.procs import wait_until
from tests.support.running_sum import Deployment, InputRecord, verify
from tests.support.topics import read_topic

FOREIGN = {
    "type": "record",
    "name": "Number",
    "namespace": "someone.else",
    "fields": [{"name": "n", "type": "long"}, {"name": "unit", "type": "string"}],
}


@pytest.mark.dead_letters
def test_bad_records_go_to_dead_letters_and_good_ones_exactly_once(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    rng = random.Random(9)
    dep = Deployment(stack.bootstrap, stack.redis_url, namespace, ROOT / "schemas", tmp_path)
    writer = SourceWriter(stack.bootstrap, registry, dep.numbers, "mw.examples.Number")
    foreign = SchemaRegistry()
    foreign.add(FOREIGN)
    foreign_serde = AvroSerde(foreign, "someone.else.Number")

    good: list[InputRecord] = []
    bad: dict[bytes, str] = {}  # id -> the error text expected in its dead letter
    worker = dep.add_worker("w0").start()
    for i in range(6_000):
        rid = rng.randbytes(16)
        kind = rng.random()
        key = f"key-{rng.randrange(50)}"
        if kind < 0.01:
            writer.write_raw(key.encode(), b"\x00\x01 not avro", i, rid)
            bad[rid] = "bad marker"
        elif kind < 0.02:
            writer.write_raw(key.encode(), foreign_serde.encode({"n": 1, "unit": "kg"}), i, rid)
            bad[rid] = "UnknownSchemaError"
        elif kind < 0.03:
            writer.write_raw(None, AvroSerde(registry, "mw.examples.Number").encode({"n": 1}), i, rid)
            bad[rid] = "no key"
        elif kind < 0.04:
            writer.write(key, {"n": -rng.randint(1, 9)}, i, rid)
            bad[rid] = "ValueError: negative amount"
        else:
            rec = InputRecord(key, rng.randint(1, 9), i, rid)
            writer.write(rec.key, {"n": rec.n}, rec.ts, rec.id)
            good.append(rec)
        if i == 3_000:
            writer.flush()
            wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
            worker.kill()
            worker.start()
    writer.flush()
    dep.wait_caught_up(writer.end_offsets, timeout=120)
    worker.terminate()

    dead = read_topic(stack.bootstrap, topic_name(namespace, "running_sum.dead-letters"))
    by_source: dict[bytes, list[dict[str, bytes]]] = {}
    seen_ids: set[bytes] = set()
    for m in dead:
        if m.id in seen_ids:
            continue  # a re-send after the crash; consumers drop it by id
        seen_ids.add(m.id)
        by_source.setdefault(m.headers["mw-source-id"], []).append(m.headers)
    assert set(by_source) == set(bad), "dead letters do not match the bad records"
    assert all(len(v) == 1 for v in by_source.values()), "a bad record was dead-lettered twice"

    originals = {m.id: m for m in read_topic(stack.bootstrap, dep.numbers)}
    for rid, [headers] in by_source.items():
        src = originals[rid]
        assert headers["mw-source-topic"].decode() == dep.numbers
        assert int(headers["mw-source-partition"]) == src.partition
        assert int(headers["mw-source-offset"]) == src.offset
        assert bad[rid] in headers["mw-error"].decode(), headers["mw-error"]

    assert verify(good, registry, dep) == []
