"""Throughput and latency of one exactly-once worker against the raw consumer ceiling.

Run: ``make bench`` (or ``.venv/bin/python bench/throughput.py [--records N]``).

1. Starts a local stack and loads N Avro records (10,000 keys, Zipf-skewed) into
   ``events`` (4 partitions).
2. (a) Ceiling: a plain confluent-kafka consumer reads and Avro-decodes them all.
   (a') Library floor: the same consumer doing only what any exactly-once keyed count
   must do per record through these libraries (id header, decode, encode, derive the
   production id, produce with a delivery callback): no state, dedup or checkpoint.
3. (b) One worker process of ``KeyedCount`` (exactly-once, strong productions; state,
   dedup, checkpoint, productions all on) processes them all; timed from its first
   commit to the checkpoint holding the end offsets of every partition, with the
   worker's CPU time per record over the same window. (b') The same
   with ``KeyedCountEvery``, which emits each key's count once a second instead of
   once per record.
4. Latency: a fresh namespace fed at a steady 10,000 records/s; the worker records,
   for every record, its commit time minus the record's timestamp (set when the
   record was produced).

Prints the figures; the last line is a JSON object with ``records_per_s``,
``raw_consume_records_per_s``, ``ratio`` and ``core`` (``MW_CORE``: ``native``, the
default where it is installed, or ``python``) among others.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import Consumer, Message, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: bench.* importable

from bench.cpu_split import CpuSplit, stack_pids
from bench.profiling import Spy, breakdown
from mwcore.api import ids
from mwcore.api.signing import UNSIGNED, Signer
from mwcore.cores import default_name
from mwcore.serde.avro import SchemaRegistry
from mwcore.serde.framing import Wire
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import (
    consumer_config,
    end_offsets,
    ensure_topics,
    partition_counts,
    producer_config,
    topic_name,
)
from testbed import wire
from testbed.outside import VisibleLatency

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
KEYS = 10_000


def load(
    stack: LocalStack,
    registry: SchemaRegistry,
    topic: str,
    n: int,
    framed: Wire = wire.SUITE_WIRE,
    signer: Signer = UNSIGNED,
) -> dict[int, int]:
    """``n`` events in ``topic``, framed ``framed`` (a variant's MW_WIRE: the kit's
    default unless told, ``testbed/wire.py``) and signed by ``signer`` (a variant's
    MW_ID_SECRET); each partition's end."""
    rng = random.Random(1)
    # Zipf-like skew: a few queries are very popular, most are rare.
    weights = [1 / (i + 1) ** 1.1 for i in range(KEYS)]
    keys = rng.choices([f"query-{i}" for i in range(KEYS)], weights, k=n)
    writer = wire.source_writer(stack, registry, topic, "mw.bench.Event", framed, signer=signer)
    encode = writer.serde.encode
    base = int(time.time() * 1000)
    for i, key in enumerate(keys):
        value = encode({"query": key, "lang": "en", "latency_us": i % 997})
        writer.write_raw(key.encode(), value, base + i // 1000, ids.random_id())
        if i % 50_000 == 0:
            writer.producer.poll(0)
    writer.flush(120)
    return writer.end_offsets


def read_to_end(stack: LocalStack, topic: str, group: str) -> Iterator[Message]:
    """Every message of ``topic`` from the start, then stop at each partition's end."""
    c = Consumer(consumer_config(stack.bootstrap, group, **{"enable.partition.eof": True}))
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    eof: set[int] = set()
    try:
        while len(eof) < PARTITIONS:
            for m in c.consume(5000, 1.0):
                if m.error() is not None:
                    eof.add(m.partition() or 0)
                else:
                    yield m
    finally:
        c.close()


def raw_consume(
    stack: LocalStack,
    registry: SchemaRegistry,
    topic: str,
    n: int,
    schema: str = "mw.bench.Event",
    framed: Wire = wire.SUITE_WIRE,
) -> float:
    decode = wire.serde(stack, registry, topic, schema, framed).decode
    count, start = 0, None
    for m in read_to_end(stack, topic, f"raw-{os.getpid()}"):
        if start is None:
            start = time.perf_counter()
        decode(m.value() or b"")
        count += 1
    elapsed = time.perf_counter() - (start or time.perf_counter())
    assert count == n, f"raw consumer read {count} of {n}"
    return count / elapsed


def library_floor(stack: LocalStack, registry: SchemaRegistry, topic: str, n: int) -> float:
    """What any exactly-once keyed count in CPython on these libraries pays per record,
    with no runtime at all: consume, read the id header, key and timestamp, decode,
    encode the output, derive its id, produce it with a delivery callback, serve the
    callbacks. No state, no dedup, no checkpoint. The worker cannot beat this."""
    out_topic = f"{topic}.floor"
    ensure_topics(stack.bootstrap, {out_topic: PARTITIONS})
    decode = wire.serde(stack, registry, topic, "mw.bench.Event").decode
    encode = wire.serde(stack, registry, out_topic, "mw.bench.Count").encode
    producer = Producer(producer_config(stack.bootstrap))
    acked = [0]

    def delivered(err: object, msg: object) -> None:
        acked[0] += 1

    count, start = 0, None
    derive, produce = ids.derive, producer.produce
    for m in read_to_end(stack, topic, f"floor-{os.getpid()}"):
        if start is None:
            start = time.perf_counter()
        rid = next(v for k, v in m.headers() or () if k == "mw-id")
        key, ts = m.key(), m.timestamp()[1]
        count += 1
        decode(m.value() or b"")
        value = encode({"count": count})
        pid = derive(rid, 0)  # type: ignore[arg-type]
        produce(out_topic, value, key, timestamp=ts, headers=[("mw-id", pid)], on_delivery=delivered)
        if count % 5000 == 0:
            producer.poll(0)
    producer.flush(60)
    elapsed = time.perf_counter() - (start or time.perf_counter())
    assert count == n and acked[0] == n, f"floor loop read {count}, acked {acked[0]} of {n}"
    return count / elapsed


def worker_env(stack: LocalStack, namespace: str, **extra: str) -> dict[str, str]:
    """The worker process's environment: this one's, the stack's addresses, and the
    bench's own ``PYTHONPATH`` after the caller's (a run of older code from a worktree,
    ``PYTHONPATH=<worktree>/libs/mwcore/src:<its native module>``, reaches the worker too:
    until 2026-11-28 the worker ran the installed code whatever the caller's path)."""
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    return {
        **os.environ,
        "MW_BOOTSTRAP": stack.bootstrap,
        "MW_REDIS_URL": stack.redis_url,
        "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
        "MW_NAMESPACE": namespace,
        "MW_LOG_LEVEL": "warning",
        "PYTHONPATH": path,
        **wire.registry_env(stack),
        **extra,
    }


def positions(r: redis.Redis, namespace: str, topic: str, computation: str = "keyed_count") -> list[int]:
    return [
        int(r.hget(f"mw:{{{namespace}/{computation}/{p}}}:pos", f"{topic}:{p}") or 0)
        for p in range(PARTITIONS)
    ]


def run_worker(
    stack: LocalStack,
    namespace: str,
    topic: str,
    ends: dict[int, int],
    cls: str = "KeyedCount",
    profile: Path | None = None,
    **env: str,
) -> dict[str, Any]:
    """Throughput of one worker process, and the CPU it used per record over the same
    window (less noisy than the rate: the broker and Redis share the two cores);
    ``profile``: py-spy samples of that window (``bench/profiling.py``)."""
    r = redis.Redis.from_url(stack.redis_url)
    computation = "keyed_count" if cls == "KeyedCount" else "keyed_count_every"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mwcore", "run", f"bench.keyed_count:{cls}"],
        env=worker_env(stack, namespace, **env),
        cwd=ROOT,
    )
    spy = Spy(proc.pid, profile) if profile else None
    try:
        start = None
        split = CpuSplit({"worker": proc.pid, **stack_pids(stack)})
        total = sum(ends.values())
        while True:
            pos = positions(r, namespace, topic, computation)
            done = sum(pos)
            if start is None and done > 0:
                start, start_done = time.perf_counter(), done
                split.start()
                if spy is not None:
                    spy.start()
            if all(pos[p] >= ends.get(p, 0) for p in range(PARTITIONS)):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}")
            time.sleep(0.02)
        elapsed = time.perf_counter() - start  # type: ignore[operator]
        split.stop()
        if spy is not None:
            spy.stop()
        records = total - start_done
        out: dict[str, Any] = {"records_per_s": records / elapsed, "seconds": elapsed}
        cpu = split.per_record(records)
        if "worker" in cpu:
            out["cpu_us_per_record"] = cpu["worker"]
        out["cpu_split_us_per_record"] = cpu
        # what was taken as a record: none may have been a dead letter (an input the worker
        # could not read or verify would pass through as fast, and measure nothing)
        dlq = topic_name(namespace, f"{computation}.dead-letters")
        out["dead_letters"] = sum(
            end_offsets(stack.bootstrap, partition_counts(stack.bootstrap, [dlq])).values()
        )
        return out
    finally:
        proc.terminate()
        proc.wait(60)


def steady_latency(
    stack: LocalStack, registry: SchemaRegistry, rate: int, seconds: int, visible: bool = False, **env: str
) -> dict[str, float]:
    """The worker's commit latency per record at a steady ``rate``; ``visible``: also how
    long its productions take to be seen by a ``read_committed`` reader outside the kit
    (``latency_visible_*``: what transactional productions cost a reader)."""
    namespace = f"lat{os.getpid()}{next(_runs)}"
    topic = topic_name(namespace, "events")
    ensure_topics(stack.bootstrap, {topic: PARTITIONS})
    out = Path(tempfile.mkdtemp()) / "latency.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mwcore", "run", "bench.keyed_count:KeyedCount"],
        env=worker_env(stack, namespace, MW_LATENCY_OUT=str(out), **env),
        cwd=ROOT,
    )
    follower: list[VisibleLatency] = []

    def follow() -> None:  # once the worker made its output topic (a warm-up record is in)
        if visible:
            follower.append(VisibleLatency(stack.bootstrap, topic_name(namespace, "counts")).start())

    seen: list[int] = []
    try:
        feed_steadily(
            stack,
            registry,
            namespace,
            topic,
            rate,
            seconds,
            on_warm=follow,
            framed=wire.of(env),
            signer=wire.signer_of(env),
        )
        for f in follower:  # every production seen (each record makes one)
            deadline = time.monotonic() + 30
            while f.seen() < rate * seconds and time.monotonic() < deadline:
                time.sleep(0.05)
            seen = f.stop()
    finally:
        proc.terminate()
        proc.wait(60)
    data = json.loads(out.read_text())

    def quantiles(name: str, field: str) -> dict[str, float]:
        if field not in data:  # a worker of older code (A/B runs)
            return {}
        xs = sorted(data[field][1:])  # drop the warm-up record
        return {f"{name}_median_ms": xs[len(xs) // 2], f"{name}_p99_ms": xs[int(len(xs) * 0.99)]}

    return {
        "latency_rate_records_per_s": rate,
        "latency_records": len(data["samples_ms"]) - 1,
        **quantiles("latency", "samples_ms"),
        # the same split where the worker read each record: before it, the producer,
        # the broker and the consumer's fetch; after it, the worker's batch and commit
        **quantiles("latency_to_worker", "to_worker_ms"),
        **quantiles("latency_in_worker", "in_worker_ms"),
        **(
            {
                "latency_visible_records": len(seen),
                "latency_visible_median_ms": seen[len(seen) // 2],
                "latency_visible_p99_ms": seen[int(len(seen) * 0.99)],
            }
            if seen
            else {}
        ),
    }


_runs = itertools.count()


def feed_steadily(
    stack: LocalStack,
    registry: SchemaRegistry,
    namespace: str,
    topic: str,
    rate: int,
    seconds: int,
    on_warm: Callable[[], object] = lambda: None,
    framed: Wire = wire.SUITE_WIRE,
    signer: Signer = UNSIGNED,
) -> None:
    """Once a worker has committed a warm-up record (``on_warm`` is then called), feed
    ``topic`` at a steady ``rate`` for ``seconds`` and wait until the worker's
    checkpoint holds every partition's end."""
    r = redis.Redis.from_url(stack.redis_url)
    writer = wire.source_writer(stack, registry, topic, "mw.bench.Event", framed, signer=signer)
    # Low linger: the producer should not add batching delay of its own to the figure.
    writer.producer = type(writer.producer)({**_producer_conf(stack.bootstrap), "linger.ms": 1})
    encode = writer.serde.encode
    rng = random.Random(2)
    # Wait until the worker owns its intervals (a first record round-trips).
    writer.write_raw(
        b"warmup", encode({"query": "warmup", "lang": "en", "latency_us": 0}), 0, ids.random_id()
    )
    writer.flush()
    deadline = time.monotonic() + 60
    while sum(positions(r, namespace, topic)) < 1:
        if time.monotonic() > deadline:
            raise TimeoutError("the latency worker never committed")
        time.sleep(0.05)
    on_warm()
    # A steady rate at millisecond resolution: each millisecond, the records due by
    # then, each stamped when it is produced. (Sleeping before every record cost the
    # generator most of a core at 10,000/s, on the cores the worker and broker share.)
    n = rate * seconds
    i = 0
    start = time.perf_counter()
    while i < n:
        due = min(n, int((time.perf_counter() - start) * rate) + 1)
        while i < due:
            key = f"query-{rng.randrange(KEYS)}"
            value = encode({"query": key, "lang": "en", "latency_us": i})
            writer.write_raw(key.encode(), value, time.time_ns() // 1_000_000, ids.random_id())
            i += 1
        writer.producer.poll(0)
        time.sleep(max(0.0, start + i / rate - time.perf_counter()))
    writer.flush()
    ends = writer.end_offsets
    while not all(positions(r, namespace, topic)[p] >= ends.get(p, 0) for p in range(PARTITIONS)):
        time.sleep(0.05)


def _producer_conf(bootstrap: str) -> dict[str, object]:
    return producer_config(bootstrap)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--latency-seconds", type=int, default=20)
    parser.add_argument("--latency-rate", type=int, default=10_000)
    parser.add_argument("--profile", type=Path, help="py-spy the worker's timed span (b) into this file")
    args = parser.parse_args()
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    with LocalStack() as stack:
        namespace = f"bench{os.getpid()}"
        topic = topic_name(namespace, "events")
        ensure_topics(stack.bootstrap, {topic: PARTITIONS})
        t = time.perf_counter()
        ends = load(stack, registry, topic, args.records)
        print(f"loaded {args.records} records in {time.perf_counter() - t:.1f}s", flush=True)
        raw = raw_consume(stack, registry, topic, args.records)
        print(f"(a) raw consume + Avro decode: {raw:,.0f} records/s", flush=True)
        floor = library_floor(stack, registry, topic, args.records)
        print(
            f"(a') library floor (consume, decode, encode, produce, acks): {floor:,.0f} records/s", flush=True
        )
        worker = run_worker(stack, namespace, topic, ends, profile=args.profile)
        print(
            f"(b) keyed count, exactly-once, strong productions: {worker['records_per_s']:,.0f} records/s"
            f" ({worker.get('cpu_us_per_record', 0):.1f} us of worker CPU per record)",
            flush=True,
        )
        every = run_worker(stack, namespace, topic, ends, "KeyedCountEvery")
        print(
            f"(b') the same count emitted per key once a second: {every['records_per_s']:,.0f} records/s",
            flush=True,
        )
        latency = steady_latency(stack, registry, args.latency_rate, args.latency_seconds)
        print(
            f"latency at {args.latency_rate}/s: median {latency['latency_median_ms']} ms, "
            f"p99 {latency['latency_p99_ms']} ms",
            flush=True,
        )
    result = {
        "records": args.records,
        "keys": KEYS,
        "records_per_s": round(worker["records_per_s"]),
        "raw_consume_records_per_s": round(raw),
        "ratio": round(worker["records_per_s"] / raw, 3),
        "library_floor_records_per_s": round(floor),
        "worker_cpu_us_per_record": round(worker.get("cpu_us_per_record", 0), 1),
        "cpu_split_us_per_record": worker.get("cpu_split_us_per_record", {}),
        "emit_per_second_records_per_s": round(every["records_per_s"]),
        **latency,
        "core": os.environ.get("MW_CORE") or default_name(),  # the worker's (it inherits the environment)
        **({"profile": breakdown(args.profile)} if args.profile and args.profile.exists() else {}),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
