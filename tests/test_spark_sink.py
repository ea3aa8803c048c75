"""The Spark sink (``df.write.format("mw")``): a write that fails part way and is run
again sends the rows that made it the first time again, with the same ids, and a
computation reading the stream counts every row exactly once.

Three Spark tasks write 600 rows without an id column (each row's id then derives
from its stream, key, timestamp and value). The last task fails on purpose once the
other two have put their rows in Kafka, which fails the write; the same write is run
again and succeeds. The stream then holds repeats, each under its first copy's id
and value, and a running-sum worker over it matches the rows exactly (no sum counts a
repeat).
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from mwcore.archive.spark.sink import content_id
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import end_offsets
from testbed import wire
from testbed.topics import read_topic
from tests.conftest import ROOT
from tests.support.running_sum import PARTITIONS, Deployment, InputRecord, verify

pytestmark = [pytest.mark.spark, pytest.mark.exactly_once]

ROWS, TASKS = 600, 3
FAIL_TS = 1_000_000 + ROWS - 1  # the last row of the last task


def gate(n: int, ts: int, marker: str, bootstrap: str, topic: str, want: int) -> int:
    """On a Spark executor: while ``marker`` exists, fail the task of the row at
    ``FAIL_TS``, once ``want`` records (the other tasks' rows) are in Kafka (bounded)."""
    if ts != FAIL_TS or not Path(marker).exists():
        return n
    deadline = time.monotonic() + 120
    while sum(end_offsets(bootstrap, {topic: PARTITIONS}).values()) < want:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    raise RuntimeError("a task failure, injected")


def test_a_write_run_again_after_a_failed_task_is_counted_once(
    spark: Any, stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    dep = Deployment.on(stack, namespace, tmp_path)
    rows = [(f"key-{i % 30}", i % 9 + 1, 1_000_000 + i) for i in range(ROWS)]
    marker = tmp_path / "fail"
    marker.touch()
    done_first = ROWS // TASKS * (TASKS - 1)
    bootstrap, topic = stack.bootstrap, dep.numbers

    schema = "key string, n long, timestamp long"
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, TASKS), schema)
    gated = F.udf(lambda n, ts: gate(n, ts, str(marker), bootstrap, topic, done_first), LongType())
    df = df.withColumn("n", gated("n", "timestamp"))
    write = (
        df.write.format("mw")
        .mode("append")
        .option("bootstrap", stack.bootstrap)
        .option("namespace", namespace)
        .option("stream", "numbers")
        .option("schemasDir", str(ROOT / "schemas"))
        .option("avroSchema", "mw.examples.Number")
    )
    with pytest.raises(Exception, match="a task failure, injected"):
        write.save()
    first = sum(end_offsets(stack.bootstrap, {topic: PARTITIONS}).values())
    assert first >= done_first  # two tasks' rows are in the stream
    marker.unlink()
    write.save()  # the same write again: every row, the first two tasks' once more

    serde = wire.serde(stack, registry, topic, "mw.examples.Number")
    inputs = [
        InputRecord(key, n, ts, content_id("numbers", key.encode(), ts, serde.encode({"n": n})))
        for key, n, ts in rows
    ]
    sent = read_topic(stack.bootstrap, topic)
    assert len(sent) == first + ROWS
    values: dict[bytes, set[bytes]] = defaultdict(set)
    for m in sent:
        values[m.id].add(m.value)
    assert values.keys() == {r.id for r in inputs}  # each row under its own id, both times
    assert all(len(v) == 1 for v in values.values())  # a repeat carries its first copy's value

    worker = dep.add_worker("s0").start()
    try:
        ends = end_offsets(stack.bootstrap, {topic: PARTITIONS})
        dep.wait_caught_up({p: end for (_, p), end in ends.items()}, 120)
    finally:
        worker.terminate()
    problems = verify(inputs, registry, dep)
    assert problems == [], "\n".join(problems)
