"""Rolling schema upgrades, in either order, on the real broker.

A producer (the kit's ``Injector``) writes ``readings``; a consumer worker
(``ReadingEcho``, a process of its own with its own schemas directory) echoes each
record as it decoded it. ``mw.tests.Reading`` v1 is {key, n}; v2 adds ``unit`` with
the default "one".

- Producer first: the consumer has v1 only; the producer writes v1 records, then is
  upgraded to v2. The consumer learns v2 from the schemas topic: every record is
  echoed, resolved to v1 (no unit), and nothing is dead-lettered. Records of a v3 that
  a v1 reader cannot resolve (``n`` turned into a string, published past the check as
  a foreign tool could) are dead-lettered with the reason.
- Consumer first: the consumer has v2 while the producer still writes v1, then v2:
  v1 records come out with the default unit, v2 records with their own; nothing is
  dead-lettered.
- An incompatible v2 (``n`` removed, and it has no default) is refused when its
  producer starts: a ``ConfigError`` from the API, one line and exit code 2 from
  ``mw run``; nothing of it reaches the schemas topic.

Negative control: with the schemas-topic lookup off (``MW_UNSAFE_NO_SCHEMA_LOOKUP``)
the producer-first run dead-letters the v2 records, and the same check says so.

These are upgrades through the namespace's schemas topic: the streams are framed
single-object whatever the suite's framing. Upgrades through a schema registry (ids,
its compatibility check) are ``tests/test_interop_registry.py``'s.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from mwcore.api import ids
from mwcore.errors import ConfigError
from mwcore.injector.injector import Injector
from mwcore.serde.avro import SchemaRegistry, decode_any
from mwcore.serde.framing import Wire
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.transport.topics import end_offsets, topic_name
from testbed.procs import ROOT, WorkerProc, wait_until, worker_env
from testbed.topics import read_topic
from testbed.wire import source_writer

ECHO = "tests.support.computations:ReadingEcho"
WIRE: Wire = "single-object"
TS0 = 1_700_000_000_000


def reading(version: int, *fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "Reading",
        "namespace": "mw.tests",
        "version": version,
        "fields": list(fields),
    }


KEY = {"name": "key", "type": "string"}
N = {"name": "n", "type": "long"}
V1 = reading(1, KEY, N)
V2 = reading(2, KEY, N, {"name": "unit", "type": "string", "default": "one"})
V2_WITHOUT_N = reading(2, KEY, {"name": "unit", "type": "string", "default": "one"})
V3_N_AS_TEXT = reading(3, KEY, {"name": "n", "type": "string"})
REFUSAL = (
    "schema mw.tests.Reading v2 removes field 'n' that has no default: a reader of v1 cannot read it "
    "(Avro: reader field without default missing in writer)"
)


def schemas_dir(tmp_path: Path, schema: dict[str, Any]) -> Path:
    d = tmp_path / f"schemas-v{schema['version']}-{len(schema['fields'])}"
    d.mkdir(exist_ok=True)
    (d / "reading.avsc").write_text(json.dumps(schema))
    return d


@dataclass(frozen=True)
class Sent:
    id: bytes
    value: dict[str, Any]
    version: int


def produce(
    stack: LocalStack, client: redis.Redis, namespace: str, schema: Path, count: int, first: int
) -> list[Sent]:
    """``count`` readings from a producer whose schemas directory is ``schema``."""
    registry = SchemaRegistry.from_directory(schema)
    version = registry.latest("mw.tests.Reading").version
    inj = Injector(
        bootstrap=stack.bootstrap,
        client=client,
        registry=registry,
        name="meter",
        wire=WIRE,
        outputs={"readings": "mw.tests.Reading"},
        namespace=namespace,
    )
    try:
        inj.start()
    except ConfigError:
        inj.schemas.close()
        raise
    rng = random.Random(first)
    sent = []
    for i in range(first, first + count):
        key = f"k{i % 13}"
        value: dict[str, Any] = {"key": key, "n": i}
        if version >= 2:
            value["unit"] = "kg"
        rid = rng.randbytes(16)
        inj.send("readings", key, value, TS0 + i, rid)
        sent.append(Sent(rid, value, version))
    inj.close()
    return sent


def write_unresolvable(stack: LocalStack, namespace: str, count: int) -> dict[bytes, str]:
    """Records of a v3 that v1 readers cannot resolve, its schema published without the
    check (a producer outside the kit); id -> the reason their dead letters must give."""
    registry = SchemaRegistry()
    sv = registry.add(V3_N_AS_TEXT)
    topic = SchemaTopic(stack.bootstrap, namespace)
    topic.publish([sv], check=False)
    topic.close()
    writer = source_writer(stack, registry, topic_name(namespace, "readings"), "mw.tests.Reading", WIRE)
    out = {}
    for i in range(count):
        rid = bytes([0xEE, i]) * 8
        writer.write("k0", {"key": "k0", "n": f"#{i}"}, TS0, rid)
        out[rid] = "cannot decode as mw.tests.Reading v1 (written with v3"
    writer.flush()
    return out


def expected(s: Sent, reader_version: int) -> dict[str, Any]:
    if reader_version == 1:
        return {"key": s.value["key"], "n": s.value["n"]}
    return {"unit": "one", **s.value}


def check_upgrade(
    stack: LocalStack,
    namespace: str,
    reader_dir: Path,
    sent: list[Sent],
    unresolvable: dict[bytes, str],
) -> list[str]:
    """Every way the consumer's output differs from "each record echoed once, resolved
    into the reader's version; only the unresolvable ones dead-lettered, with why"."""
    registry = SchemaRegistry.from_directory(reader_dir)
    reader_version = registry.latest("mw.tests.Reading").version
    echoes: dict[bytes, Any] = {}
    for m in read_topic(stack.bootstrap, topic_name(namespace, "echoes")):
        echoes.setdefault(m.id, decode_any(registry, m.value)[1])
    dead = {
        m.headers["mw-source-id"]: m.headers["mw-error"].decode()
        for m in read_topic(stack.bootstrap, topic_name(namespace, "reading_echo.dead-letters"))
    }
    problems = []
    wrongly_dead = [s for s in sent if s.id in dead]
    if wrongly_dead:
        versions = ", ".join(f"v{v}" for v in sorted({s.version for s in wrongly_dead}))
        problems.append(
            f"{len(wrongly_dead)} readable records dead-lettered (written with {versions}), "
            f"e.g. {dead[wrongly_dead[0].id]!r}"
        )
    lost = [s for s in sent if s.id not in dead and ids.derive(s.id, 0) not in echoes]
    if lost:
        problems.append(f"{len(lost)} records neither echoed nor dead-lettered")
    wrong = [
        (echoes[ids.derive(s.id, 0)], expected(s, reader_version))
        for s in sent
        if ids.derive(s.id, 0) in echoes and echoes[ids.derive(s.id, 0)] != expected(s, reader_version)
    ]
    if wrong:
        problems.append(
            f"{len(wrong)} records resolved wrongly, e.g. got {wrong[0][0]}, expected {wrong[0][1]}"
        )
    for rid, reason in unresolvable.items():
        if rid not in dead:
            problems.append(f"an unresolvable record {rid.hex()} was not dead-lettered")
        elif reason not in dead[rid]:
            problems.append(f"an unresolvable record's dead letter says {dead[rid]!r}, not {reason!r}")
    return problems


def start_consumer(stack: LocalStack, namespace: str, tmp_path: Path, schema: Path, **env: str) -> WorkerProc:
    worker_environment = worker_env(stack, namespace, MW_SCHEMAS_DIR=str(schema), MW_WIRE=WIRE, **env)
    worker = WorkerProc(ECHO, worker_environment, tmp_path, "echo").start()
    wait_until(lambda: worker.ready, 60, what="the consumer to be assigned its intervals")
    return worker


def caught_up(stack: LocalStack, client: redis.Redis, namespace: str, worker: WorkerProc) -> None:
    """Wait until the consumer's checkpointed positions are at the end of ``readings``."""
    topic = topic_name(namespace, "readings")
    ends = end_offsets(stack.bootstrap, {topic: 4})

    def done() -> bool:
        for (_, p), end in ends.items():
            pos = client.hget(f"mw:{{{namespace}/reading_echo/{p}}}:pos", f"{topic}:{p}")
            if int(pos or 0) < end:
                return False
        return True

    wait_until(done, 120, 0.25, "the consumer to reach the end of readings")
    assert worker.alive, worker.current_log()[-3000:]


def producer_first(
    stack: LocalStack, client: redis.Redis, namespace: str, tmp_path: Path, **env: str
) -> tuple[list[str], WorkerProc]:
    v1, v2 = schemas_dir(tmp_path, V1), schemas_dir(tmp_path, V2)
    consumer = start_consumer(stack, namespace, tmp_path, v1, **env)
    try:
        sent = produce(stack, client, namespace, v1, 200, 0)
        sent += produce(stack, client, namespace, v2, 300, 200)  # the producer upgraded first
        unresolvable = write_unresolvable(stack, namespace, 5)
        caught_up(stack, client, namespace, consumer)
    finally:
        consumer.terminate()
    v2_fp = SchemaRegistry.from_directory(v2).latest("mw.tests.Reading").fingerprint.to_bytes(8, "little")
    readings = read_topic(stack.bootstrap, topic_name(namespace, "readings"))
    assert sum(m.value[2:10] == v2_fp for m in readings) == 300  # the upgrade did happen
    return check_upgrade(stack, namespace, v1, sent, unresolvable), consumer


@pytest.mark.dead_letters
def test_producer_first_old_consumers_resolve_the_new_schema_from_the_topic(
    stack: LocalStack, redis_client: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    problems, consumer = producer_first(stack, redis_client, namespace, tmp_path)
    assert problems == [], "\n".join(problems)
    assert consumer.log_has('"schema_learnt"')


@pytest.mark.dead_letters
@pytest.mark.negative_control
def test_negative_control_without_the_lookup_producer_first_dead_letters(
    stack: LocalStack, redis_client: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    """The same run and check, the consumer's schemas-topic lookup turned off."""
    problems, _ = producer_first(stack, redis_client, namespace, tmp_path, MW_UNSAFE_NO_SCHEMA_LOOKUP="1")
    print("negative control found:", *problems, sep="\n  ")
    assert any("300 readable records dead-lettered (written with v2)" in p for p in problems), problems


@pytest.mark.dead_letters
def test_consumer_first_new_consumers_read_old_records_with_defaults(
    stack: LocalStack, redis_client: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    v1, v2 = schemas_dir(tmp_path, V1), schemas_dir(tmp_path, V2)
    consumer = start_consumer(stack, namespace, tmp_path, v2)
    try:
        sent = produce(stack, redis_client, namespace, v1, 200, 0)  # the producer not upgraded yet
        sent += produce(stack, redis_client, namespace, v2, 100, 200)
        caught_up(stack, redis_client, namespace, consumer)
    finally:
        consumer.terminate()
    problems = check_upgrade(stack, namespace, v2, sent, {})
    assert problems == [], "\n".join(problems)


def test_an_incompatible_schema_is_refused_at_the_producers_start(
    stack: LocalStack, redis_client: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    produce(stack, redis_client, namespace, schemas_dir(tmp_path, V1), 10, 0)  # v1 is on the topic
    bad = schemas_dir(tmp_path, V2_WITHOUT_N)
    with pytest.raises(ConfigError) as refused:
        produce(stack, redis_client, namespace, bad, 10, 10)
    assert str(refused.value) == REFUSAL

    env = {
        **worker_env(stack, namespace, MW_SCHEMAS_DIR=str(bad), MW_WIRE=WIRE),
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "mwcore", "run", ECHO],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("%")]
    assert (proc.returncode, lines) == (2, [f"mw: configuration error: {REFUSAL}"]), proc.stderr

    topic = SchemaTopic(stack.bootstrap, namespace)
    topic.refresh()
    topic.close()
    names = sorted((d["name"], d.get("version")) for d in topic.documents.values())
    assert names == [("mw.tests.Reading", 1)]  # the refused v2 was never published


def test_a_replay_carries_the_writer_schemas_into_its_namespace(
    stack: LocalStack, redis_client: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    """Replayed records keep their encoding, so their writer schemas go with them: a v1
    reader in the replay's namespace resolves the v2 records it is sent."""
    from mwcore.archive.replay import Replay

    v1, v2 = schemas_dir(tmp_path, V1), schemas_dir(tmp_path, V2)
    sent = produce(stack, redis_client, namespace, v2, 20, 0)
    backfill = f"{namespace}-backfill"
    summary = Replay(
        bootstrap=stack.bootstrap,
        client=redis_client,
        registry=SchemaRegistry.from_directory(v1),  # the reader's: v2 comes from the source topic
        stream="readings",
        namespace=backfill,
        source_namespace=namespace,
    ).run()
    assert summary["records"] == 20
    reader = SchemaRegistry.from_directory(v1)
    lookup = SchemaTopic(stack.bootstrap, backfill, wait_s=0)
    reader.use_source(lookup)
    try:
        copied = [
            decode_any(reader, m.value) for m in read_topic(stack.bootstrap, topic_name(backfill, "readings"))
        ]
    finally:
        lookup.close()
    assert sorted(v["n"] for _, v in copied) == sorted(s.value["n"] for s in sent)
    assert {v["unit"] for _, v in copied} == {"kg"}  # decoded with the writer's own v2
