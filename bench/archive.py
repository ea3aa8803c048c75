"""Batch over the archive: the Spark data source against a plain consumer, and the
batch windower against the streaming one, on the same records in one run.

Run: ``.venv/bin/python bench/archive.py [--records N]`` (``make bench-archive``).

1. Starts a local stack and loads N Zeitgeist query records (the generator's
   default scenario: 300 queries, Zipf-skewed, jittered timestamps) into ``queries``
   (4 partitions).
2. Archive read: (a) a plain confluent-kafka consumer reads and Avro-decodes the
   whole range; (b) ``read_archive`` (local[2]: Spark's own Kafka source,
   ``spark-sql-kafka-0-10``, with what the kit adds: the record id, the value decoded
   by the kit's Avro codec in Arrow batches) reads it into an aggregate; (b') the same
   without decoding; (k') Spark's Kafka source alone. Spark's figures are the better
   of two runs (the first starts the Python workers).
3. Windower: (c) ``run_computation`` of the windower class in Spark over the
   archive (read, group by key, run, encode), to a count of its output; (d) one
   streaming windower worker process (exactly-once, strong productions) over the
   same topic: the watermark held until the worker has committed every input
   position, then moved past the end so every window's timer fires; timed from its
   first commit until every window is in ``window_counts``. Both must produce the
   same number of windows.

The last line printed is a JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis
from pyspark.sql import SparkSession

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.*, services.*

from bench.throughput import PARTITIONS, positions, raw_consume, worker_env
from mwcore.api.clock import MIN_WATERMARK
from mwcore.archive.spark.source import read_archive, take_writers
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import end_offsets, ensure_topics, topic_name
from services.injector.scenario import Scenario, Traffic
from testbed import wire

ROOT = Path(__file__).resolve().parent.parent
START_MS = 1_700_000_000_000


def load(stack: LocalStack, registry: SchemaRegistry, topic: str, n: int) -> tuple[dict[int, int], int, int]:
    """N records of the default scenario; the partitions' ends, the number of
    (query, second) windows and the end of the last second (ms)."""
    traffic = Traffic(Scenario(), START_MS)
    writer = wire.source_writer(stack, registry, topic, "zeitgeist.Query")
    encode = writer.serde.encode
    windows: set[tuple[str, int]] = set()
    written, second, latest = 0, 0, 0
    while written < n:
        for ts, query, lang, user in traffic.second(second)[: n - written]:
            value = encode({"query": query, "lang": lang, "user": user, "source_file": "bench"})
            writer.write_raw(query.encode(), value, ts, os.urandom(16))
            windows.add((query, ts // 1000))
            latest = max(latest, ts)
            written += 1
        writer.producer.poll(0)
        second += 1
    writer.flush(120)
    return writer.end_offsets, len(windows), (latest // 1000 + 1) * 1000  # every bucket closed


def _best_of_two(job: Callable[[], int]) -> tuple[float, int]:
    """Seconds of the faster of two runs of ``job`` (the first starts Spark's Python
    workers), and what it returned."""
    best, result = float("inf"), 0
    for _ in range(2):
        t = time.perf_counter()
        result = job()
        best = min(best, time.perf_counter() - t)
    return best, result


def _ids(stack: LocalStack) -> dict[str, str]:
    """``read_archive``'s option for values framed "confluent": the registry of their ids."""
    url = stack.schema_registry_url
    return {} if url is None else {"schemaRegistryUrl": url}


def spark_read(spark: SparkSession, stack: LocalStack, namespace: str, decode: bool) -> tuple[float, int]:
    from pyspark.sql import functions as F

    df = read_archive(
        spark,
        stack.bootstrap,
        "queries",
        namespace,
        ROOT / "schemas",
        decode=str(decode).lower(),
        **_ids(stack),
    )
    column = "user" if decode else "offset"
    return _best_of_two(lambda: int(df.agg(F.count("*"), F.sum(column)).collect()[0][0]))


def spark_kafka_read(spark: SparkSession, stack: LocalStack, topic: str) -> tuple[float, int]:
    """Spark's Kafka source over the same topic, with nothing on top (the floor of
    ``read_archive``, which reads through it)."""
    from pyspark.sql import functions as F

    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", stack.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("includeHeaders", "true")
        .load()
    )
    return _best_of_two(lambda: int(df.agg(F.count("*"), F.sum("offset")).collect()[0][0]))


def batch_windower(spark: SparkSession, stack: LocalStack, namespace: str, end_ms: int) -> tuple[float, int]:
    from mwcore.archive.spark.batch import run_computation

    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    take_writers(registry, stack.bootstrap, namespace, ["queries"], stack.schema_registry_url)
    df = read_archive(spark, stack.bootstrap, "queries", namespace, ROOT / "schemas", **_ids(stack))
    windower = "services.windower.computation:Windower"
    return _best_of_two(lambda: run_computation(df, windower, registry, end_ms).count())


def streaming_windower(
    stack: LocalStack, namespace: str, ends: dict[int, int], windows: int, end_ms: int
) -> float:
    r = redis.Redis.from_url(stack.redis_url)
    wm_key = f"mw:wm:{namespace}:windower"
    r.set(wm_key, MIN_WATERMARK)
    out = topic_name(namespace, "window_counts")
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.windower"],
        env=worker_env(
            stack, namespace, MW_WATERMARK="redis", **json.loads(os.environ.get("BENCH_WORKER_ENV", "{}"))
        ),
        cwd=ROOT,
    )
    topic = topic_name(namespace, "queries")
    deadline = time.monotonic() + float(os.environ.get("BENCH_TIMEOUT_S", "600"))
    try:
        start = None
        while True:
            pos = positions(r, namespace, topic, "windower")
            if start is None and sum(pos) > 0:
                start, first = time.perf_counter(), sum(pos)
            if all(pos[p] >= ends.get(p, 0) for p in range(PARTITIONS)):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"windower exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"windower positions {pos}, ends {ends}")
            time.sleep(0.02)
        r.set(wm_key, end_ms)  # every record is in: close every window
        while (made := sum(end_offsets(stack.bootstrap, {out: PARTITIONS}).values())) < windows:
            if proc.poll() is not None:
                raise RuntimeError(f"windower exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"windower produced {made} of {windows} windows")
            time.sleep(0.2)
        elapsed = time.perf_counter() - start  # type: ignore[operator]
        total = sum(ends.values())
        return (total - first) / elapsed
    finally:
        proc.terminate()
        proc.wait(60)


def _round(x: float, digits: int = 0) -> float | None:
    return None if math.isnan(x) else round(x, digits) if digits else round(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--skip-spark", action="store_true", help="only the plain consumer and the worker")
    args = parser.parse_args()
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    from mwcore.archive.spark.session import local_session

    with LocalStack() as stack:
        namespace = f"arch{os.getpid()}"
        topic = topic_name(namespace, "queries")
        ensure_topics(stack.bootstrap, {topic: PARTITIONS})
        t = time.perf_counter()
        ends, windows, end_ms = load(stack, registry, topic, args.records)
        n = sum(ends.values())
        print(f"loaded {n} records ({windows} windows) in {time.perf_counter() - t:.1f}s", flush=True)
        raw = raw_consume(stack, registry, topic, n, schema="zeitgeist.Query")
        print(f"(a) plain consumer + Avro decode: {raw:,.0f} records/s", flush=True)
        secs = secs_raw = k_secs_raw = batch_secs = float("nan")
        batch_windows = windows
        if not args.skip_spark:
            spark = local_session("local[2]", ROOT)
            secs, rows = spark_read(spark, stack, namespace, decode=True)
            assert rows == n, f"read_archive read {rows} of {n}"
            print(f"(b) read_archive, decoded: {n / secs:,.0f} records/s", flush=True)
            secs_raw, rows = spark_read(spark, stack, namespace, decode=False)
            assert rows == n
            print(f"(b') read_archive, not decoded: {n / secs_raw:,.0f} records/s", flush=True)
            k_secs_raw, rows = spark_kafka_read(spark, stack, topic)
            assert rows == n
            print(f"(k') Spark's Kafka source alone: {n / k_secs_raw:,.0f} records/s", flush=True)
            batch_secs, batch_windows = batch_windower(spark, stack, namespace, end_ms)
            spark.stop()
            print(f"(c) batch windower in Spark: {n / batch_secs:,.0f} records/s", flush=True)
        streaming = streaming_windower(stack, namespace, ends, windows, end_ms)
        print(f"(d) streaming windower, one worker: {streaming:,.0f} records/s", flush=True)
    assert batch_windows == windows, f"batch produced {batch_windows} windows, expected {windows}"
    result = {
        "records": n,
        "windows": windows,
        "raw_consume_records_per_s": round(raw),
        "spark_read_records_per_s": _round(n / secs),
        "spark_read_ratio": _round(n / secs / raw, 3),
        "spark_read_undecoded_records_per_s": _round(n / secs_raw),
        "spark_kafka_read_undecoded_records_per_s": _round(n / k_secs_raw),
        "batch_windower_records_per_s": _round(n / batch_secs),
        "streaming_windower_records_per_s": round(streaming),
        "batch_over_streaming": _round(n / batch_secs / streaming, 3),
        "spark_master": "local[2]",
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
