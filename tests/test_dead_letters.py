"""Dead letters: bad records go to the dead-letter topic with their reason; the rest go on.

Four kinds of bad record are mixed into good traffic: bytes that are not Avro, Avro
written with a schema the registry does not know, a record without a key, and a
record whose processing raises. The worker is SIGKILLed once on the way. Each bad
record lands in the dead-letter topic exactly once (after id dedup) with headers
naming its source topic, partition, offset and error; every good record is processed
exactly once.

Negative control: with bad records skipped instead of dead-lettered
(``MW_UNSAFE_DROP_DEAD_LETTERS``), the same check finds their dead letters missing.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mwcore.api import ids
from mwcore.api.context import MAX_VALUE_BYTES
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import topic_name
from testbed import wire
from testbed.procs import wait_until
from testbed.topics import read_topic
from testbed.wire import source_writer
from tests.support.computations import filler
from tests.support.running_sum import Deployment, InputRecord, verify

FOREIGN = {
    "type": "record",
    "name": "Number",
    "namespace": "someone.else",
    "fields": [{"name": "n", "type": "long"}, {"name": "unit", "type": "string"}],
}


def run_with_bad_records(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, **env: str
) -> list[str]:
    """Good traffic with the four kinds of bad record mixed in, a SIGKILL half way;
    returns every problem ``check_dead_letters`` finds."""
    rng = random.Random(9)
    dep = Deployment.on(stack, namespace, tmp_path, worker_env=dict(env))
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    foreign = SchemaRegistry()
    foreign.add(FOREIGN)
    foreign_serde = AvroSerde(foreign, "someone.else.Number", framing=wire.foreign())

    good: list[InputRecord] = []
    bad: dict[bytes, str] = {}  # id -> the error text expected in its dead letter
    worker = dep.add_worker("w0").start()
    try:
        for i in range(6_000):
            rid = rng.randbytes(16)
            kind = rng.random()
            key = f"key-{rng.randrange(50)}"
            if kind < 0.01:
                writer.write_raw(key.encode(), b"\x7f not avro", i, rid)
                bad[rid] = "bad marker"
            elif kind < 0.02:
                writer.write_raw(key.encode(), foreign_serde.encode({"n": 1, "unit": "kg"}), i, rid)
                bad[rid] = "UnknownSchemaError"
            elif kind < 0.03:
                writer.write_raw(None, writer.serde.encode({"n": 1}), i, rid)
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
    finally:
        worker.terminate()
    return check_dead_letters(stack, registry, dep, bad, good)


def check_dead_letters(
    stack: LocalStack,
    registry: SchemaRegistry,
    dep: Deployment,
    bad: dict[bytes, str],
    good: list[InputRecord],
) -> list[str]:
    """Every way the dead-letter topic and the outputs differ from "each bad record
    dead-lettered once, with its source and error; every good record exactly once"."""
    problems: list[str] = []
    dead = read_topic(stack.bootstrap, topic_name(dep.namespace, "running_sum.dead-letters"))
    by_source: dict[bytes, list[dict[str, bytes]]] = {}
    seen_ids: set[bytes] = set()
    for m in dead:
        if m.id in seen_ids:
            continue  # a re-send after the crash; consumers drop it by id
        seen_ids.add(m.id)
        by_source.setdefault(m.headers["mw-source-id"], []).append(m.headers)
    missing, unexpected = set(bad) - set(by_source), set(by_source) - set(bad)
    if missing:
        problems.append(f"{len(missing)} of {len(bad)} bad records have no dead letter")
    if unexpected:
        problems.append(f"{len(unexpected)} dead letters of records that were not bad")
    twice = [rid for rid, v in by_source.items() if len(v) > 1]
    if twice:
        problems.append(f"{len(twice)} bad records were dead-lettered twice")

    originals = {m.id: m for m in read_topic(stack.bootstrap, dep.numbers)}
    wrong: list[str] = []
    for rid, [headers, *_] in by_source.items():
        src = originals.get(rid)
        if (
            src is None
            or headers["mw-source-topic"].decode() != dep.numbers
            or int(headers["mw-source-partition"]) != src.partition
            or int(headers["mw-source-offset"]) != src.offset
            or bad.get(rid, "?") not in headers["mw-error"].decode()
        ):
            wrong.append(headers["mw-error"].decode())
    if wrong:
        problems.append(f"{len(wrong)} dead letters name the wrong source or error, e.g. {wrong[:3]}")
    problems += verify(good, registry, dep)
    return problems


@pytest.mark.dead_letters
def test_bad_records_go_to_dead_letters_and_good_ones_exactly_once(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    problems = run_with_bad_records(stack, registry, namespace, tmp_path)
    assert problems == [], "\n".join(problems)


@pytest.mark.dead_letters
@pytest.mark.negative_control
def test_negative_control_without_dead_letters_the_bad_records_are_missing(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same run and check, bad records skipped without a dead letter."""
    problems = run_with_bad_records(stack, registry, namespace, tmp_path, MW_UNSAFE_DROP_DEAD_LETTERS="1")
    print("negative control found:", *problems, sep="\n  ")
    assert any("have no dead letter" in p for p in problems), problems


@pytest.mark.dead_letters
def test_a_production_over_the_size_limit_is_a_dead_letter_and_one_at_it_is_sent(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """``ctx.produce`` refuses a value over ``MAX_VALUE_BYTES``: the call fails and its
    record becomes a dead letter naming the size and the limit; a value of exactly the
    limit (text LZ4 cannot shrink) goes through the real broker; processing goes on."""
    serde = wire.serde(stack, registry, topic_name(namespace, "sums"), "mw.examples.Sum")

    def size(length: int) -> int:
        return len(serde.encode({"key": filler(length), "total": 0, "count": 0}))

    at = MAX_VALUE_BYTES - (size(899_000) - 899_000)  # the key length of a value of the limit
    assert size(at) == MAX_VALUE_BYTES and size(at + 1) == MAX_VALUE_BYTES + 1
    dep = Deployment.on(
        stack,
        namespace,
        tmp_path,
        computation="tests.support.computations:SizedSum",
    )
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    worker = dep.add_worker("s0").start()
    truth: dict[str, int] = {}
    at_id, over_id = b"\xa1" * 16, b"\xa2" * 16
    try:
        for i in range(200):
            if i == 100:
                writer.write("key-0", {"n": at}, i, at_id)
                writer.write("key-1", {"n": at + 1}, i, over_id)
            key = f"key-{i % 5}"
            writer.write(key, {"n": i % 9 + 1}, i, bytes([7, i]) * 8)
            truth[key] = truth.get(key, 0) + i % 9 + 1
        writer.flush()
        dep.wait_caught_up(writer.end_offsets, timeout=120)
        assert worker.alive
    finally:
        worker.terminate()

    assert {k: v["total"] for k, v in dep.state().items()} == truth  # the rest went on
    sums = {m.id: m for m in read_topic(stack.bootstrap, topic_name(namespace, "sums"))}
    sent = sums[ids.derive(at_id, 0)]
    assert len(sent.value) == MAX_VALUE_BYTES
    assert serde.decode(sent.value)["key"] == filler(at)
    assert ids.derive(over_id, 0) not in sums
    dead = {m.id: m for m in read_topic(stack.bootstrap, topic_name(namespace, "running_sum.dead-letters"))}
    assert [m.headers["mw-source-id"] for m in dead.values()] == [over_id]
    error = next(iter(dead.values())).headers["mw-error"].decode()
    assert f"is {MAX_VALUE_BYTES + 1} bytes (limit {MAX_VALUE_BYTES})" in error, error
