"""The two cores side by side (semantics I-13): the same input through a pipeline on
``MW_CORE=python`` and one on ``MW_CORE=native``, at once, on a real Kafka and Redis,
gives identical productions (ids, keys, values, timestamps, headers), identical dead
letters and late copies, and identical checkpoints in Redis (state, timers, positions,
pending productions, seen ids).

The input is written in phases of event time. Each phase mixes good records with
re-sent copies (the same id), records an injector marked late, bytes that are not
Avro, Avro of a schema nobody knows, records without a key and records user code
refuses. In the second phase one worker of each pipeline is SIGKILLed while records
flow and the other takes its intervals over. After each phase the watermark moves
past it and its flush timers fire (``EventSum``: everything it does follows from the
input and the watermark).

Negative control: the native pipeline with record-id dedup off
(``MW_UNSAFE_DISABLE_DEDUP``) counts the re-sent copies again, and the same
comparison finds the difference.
"""

from __future__ import annotations

import random
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from mwcore.api.record import ID_HEADER, LATE_HEADER
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.store.checkpoint_wire import decode_entry
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import dead_letter_stream, ensure_topics, late_stream, topic_name
from testbed import wire
from testbed.native import requires_native
from testbed.procs import WorkerProc, wait_until, worker_env
from testbed.topics import read_topic
from testbed.wire import source_writer
from tests.test_dead_letters import FOREIGN

pytestmark = requires_native

COMPUTATION = "tests.support.computations:EventSum"
NAME = "event_sum"
PARTITIONS = 4
KEYS = 120
BASE = 1_700_000_000_000
PHASE_MS = 10_000
PER_PHASE = 3_000
OUTPUTS = ("sums", "totals", dead_letter_stream(NAME), late_stream(NAME))
SENDER = "mw-sender"
CHECKPOINT = ("state", "timers", "pos", "pending", "seen")  # of each interval in Redis


@dataclass(frozen=True)
class Item:
    """One message as written: the same to both pipelines."""

    key: bytes | None
    value: bytes
    ts: int
    headers: tuple[tuple[str, bytes], ...]

    @property
    def partition(self) -> int:
        return zlib.crc32(self.key or self.headers[0][1]) % PARTITIONS


def make_phase(number: AvroSerde, phase: int, seed: int) -> list[Item]:
    """A phase of event time: good records (out of order within it), and among them
    every kind of record the runtime must not simply process (``number``: the input's
    serde, in the suite's framing)."""
    rng = random.Random(seed * 1000 + phase)
    foreign = SchemaRegistry()
    foreign.add(FOREIGN)
    unknown = AvroSerde(foreign, "someone.else.Number", framing=wire.foreign())
    start = BASE + phase * PHASE_MS
    items: list[Item] = []
    for _ in range(PER_PHASE):
        rid = rng.randbytes(16)
        key = f"key-{min(int(rng.paretovariate(1.3)) - 1, KEYS - 1)}".encode()
        ts = start + rng.randrange(PHASE_MS)
        ids = ((ID_HEADER, rid),)
        kind = rng.random()
        if kind < 0.02 and items:
            items.append(rng.choice(items))  # re-sent: the same id (whichever comes first wins)
        elif kind < 0.04:
            late = str(rng.randint(1, 5_000)).encode()
            items.append(Item(key, number.encode({"n": rng.randint(1, 9)}), ts, (*ids, (LATE_HEADER, late))))
        elif kind < 0.05:
            items.append(Item(key, b"\x7f not avro", ts, ids))
        elif kind < 0.06:
            items.append(Item(key, unknown.encode({"n": 1, "unit": "kg"}), ts, ids))
        elif kind < 0.07:
            items.append(Item(None, number.encode({"n": 1}), ts, ids))
        elif kind < 0.08:
            items.append(Item(key, number.encode({"n": -rng.randint(1, 9)}), ts, ids))
        else:
            items.append(Item(key, number.encode({"n": rng.randint(1, 100)}), ts, ids))
    return items


@dataclass
class Pipeline:
    """One namespace's EventSum on one core: its input, two workers, its watermark."""

    stack: LocalStack
    registry: SchemaRegistry
    namespace: str
    core: str
    log_dir: Path
    env: dict[str, str]

    def __post_init__(self) -> None:
        self.r = connect_redis(self.stack.redis_url)
        self.topic = topic_name(self.namespace, "numbers")
        ensure_topics(self.stack.bootstrap, {self.topic: PARTITIONS})
        self.writer = source_writer(self.stack, self.registry, self.topic, "mw.examples.Number")
        env = worker_env(self.stack, self.namespace, MW_CORE=self.core, **self.env)
        self.workers = [WorkerProc(COMPUTATION, env, self.log_dir, f"{self.core}{i}") for i in range(2)]

    def key(self, index: int, suffix: str) -> str:
        return f"mw:{{{self.namespace}/{NAME}/{index}}}:{suffix}"

    def write(self, items: list[Item]) -> None:
        for it in items:
            self.writer.producer.produce(
                self.topic,
                it.value,
                it.key,
                partition=it.partition,
                timestamp=it.ts,
                headers=list(it.headers),
                on_delivery=self.writer._on_delivery,
            )
            self.writer.producer.poll(0)
        self.writer.flush()

    def commits(self) -> int:
        return sum(int(self.r.hget(self.key(i, "meta"), "commits") or 0) for i in range(PARTITIONS))

    def settled(self, below: int) -> bool:
        """Every written record is in a checkpoint, no timer below ``below`` is left,
        and no production is waiting for its acknowledgement."""
        for p in range(PARTITIONS):
            pos = int(self.r.hget(self.key(p, "pos"), f"{self.topic}:{p}") or 0)
            if pos < self.writer.end_offsets.get(p, 0) or self.r.hlen(self.key(p, "pending")):
                return False
            timers = self.r.hgetall(self.key(p, "timers"))
            if any(decode_entry(f, v).timestamp < below for f, v in timers.items()):
                return False
        return True

    def advance(self, watermark: int) -> None:
        self.r.set(f"mw:wm:{self.namespace}:{NAME}", watermark)

    def outputs(self) -> dict[str, dict[bytes, set[tuple[Any, ...]]]]:
        """Each output topic as production id -> every (key, value, timestamp, headers)
        sent under it, the namespace written out of the headers (and the sender left out)."""
        out: dict[str, dict[bytes, set[tuple[Any, ...]]]] = {}
        for stream in OUTPUTS:
            by_id: dict[bytes, set[tuple[Any, ...]]] = defaultdict(set)
            for m in read_topic(self.stack.bootstrap, topic_name(self.namespace, stream)):
                # mw-sender names the process that sent it (which one did is timing)
                headers = tuple(sorted((k, self._plain(v)) for k, v in m.headers.items() if k != SENDER))
                by_id[m.id].add((m.key, m.value, m.timestamp, headers))
            out[stream] = dict(by_id)
        return out

    def checkpoints(self) -> dict[str, Any]:
        dumps = {
            f"{p}:{part}": _dump(self.r, self.key(p, part), self._plain)
            for p in range(PARTITIONS)
            for part in CHECKPOINT
        }
        for p in range(PARTITIONS):  # the seen ids in buckets (MW_SEEN_BUCKETS), and their index
            index = self.key(p, "seen:b")
            dumps[f"{p}:seen:b"] = _dump(self.r, index, self._plain)
            for bucket in self.r.zrange(index, 0, -1):
                name = f"seen:{bucket.decode()}"
                dumps[f"{p}:{name}"] = _dump(self.r, self.key(p, name), self._plain)
        return dumps

    def _plain(self, raw: bytes) -> bytes:
        return raw.replace(self.namespace.encode(), b"<ns>")


def _dump(r: redis.Redis, key: str, plain: Any) -> Any:
    kind = r.type(key).decode()
    if kind == "hash":
        return {plain(k): plain(v) for k, v in r.hgetall(key).items()}
    if kind == "zset":
        return {plain(m): s for m, s in r.zrange(key, 0, -1, withscores=True)}
    if kind == "set":
        return {plain(m) for m in r.smembers(key)}
    if kind == "none":
        return None
    raise AssertionError(f"{key}: a {kind} the differential test does not read")


def run_both(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, **native_env: str
) -> tuple[list[str], dict[str, int]]:
    """The differences between the two pipelines, and what the Python one produced."""
    pipelines = [
        Pipeline(stack, registry, f"{namespace}-py", "python", tmp_path, {}),
        Pipeline(stack, registry, f"{namespace}-rs", "native", tmp_path, native_env),
    ]
    phases = [make_phase(pipelines[0].writer.serde, phase, seed=28) for phase in range(3)]
    try:
        for p in pipelines:
            for w in p.workers:
                w.start()
        for n, items in enumerate(phases):
            half = len(items) // 2
            before = [p.commits() for p in pipelines]
            for p in pipelines:
                p.write(items[:half])
            if n == 1:  # a crash while records flow: the other worker takes its intervals over
                for p, done in zip(pipelines, before, strict=True):
                    wait_until(lambda p=p, d=done: p.commits() >= d + 4, 60, what="commits before the crash")
                    p.workers[0].kill()
            for p in pipelines:
                p.write(items[half:])
            below = BASE + (n + 1) * PHASE_MS
            for p in pipelines:
                wait_until(lambda p=p: p.settled(0), 120, 0.25, f"{p.core} to process phase {n}")
                p.advance(below)
            for p in pipelines:
                wait_until(lambda p=p, b=below: p.settled(b), 120, 0.25, f"{p.core} to fire phase {n}")
            if n == 1:
                for p in pipelines:
                    p.workers[0].start()
        outputs = [p.outputs() for p in pipelines]
        checkpoints = [p.checkpoints() for p in pipelines]
    finally:
        for p in pipelines:
            for w in p.workers:
                w.terminate()
    differences = _differences("production", outputs[0], outputs[1])
    differences += _differences("checkpoint", checkpoints[0], checkpoints[1])
    made = {stream: len(by_id) for stream, by_id in outputs[0].items()}
    made["seen_ids"] = sum(
        len(v) for k, v in checkpoints[0].items() if ":seen" in k and ":seen:b" not in k and v
    )
    return differences, made


def _differences(what: str, python: dict[str, Any], native: dict[str, Any]) -> list[str]:
    found = []
    for part in sorted(python.keys() | native.keys()):
        a, b = python.get(part), native.get(part)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            only_a = len(a.keys() - b.keys())
            only_b = len(b.keys() - a.keys())
            unequal = [k for k in a.keys() & b.keys() if a[k] != b[k]]
            example = f", e.g. {a[unequal[0]]!r:.300} != {b[unequal[0]]!r:.300}" if unequal else ""
            found.append(
                f"{what} {part}: {only_a} only on python, {only_b} only on native, "
                f"{len(unequal)} unequal{example}"
            )
        else:
            found.append(f"{what} {part}: {a!r:.200} != {b!r:.200}")
    return found


@pytest.mark.exactly_once
def test_the_cores_give_identical_productions_dead_letters_and_checkpoints(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    differences, made = run_both(stack, registry, namespace, tmp_path)
    assert differences == [], "\n".join(differences)
    # the comparison had something to compare: every kind of output was made
    assert made["sums"] > 7_000 and made["totals"] > 400, made
    assert made[dead_letter_stream(NAME)] > 200 and made[late_stream(NAME)] > 100, made
    assert made["seen_ids"] > 7_000, made  # kept for dedup, in whichever form


@pytest.mark.exactly_once
@pytest.mark.negative_control
def test_negative_control_the_native_core_without_dedup_differs(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    differences, _ = run_both(stack, registry, namespace, tmp_path, MW_UNSAFE_DISABLE_DEDUP="true")
    print("negative control found:", *differences, sep="\n  ")
    assert any(d.startswith("production sums") for d in differences), differences
    assert any(":state" in d for d in differences), differences
