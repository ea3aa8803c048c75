"""Reading archived streams with Spark (``read_archive``: Spark's Kafka source and the
kit's decoding, run local[2]).

A stream of 4 partitions holds records with out-of-order timestamps, each with a
unique id, and one value that is not Avro. Every read is compared with the records
as written: whole, by offset range, by time range, split into many Spark partitions,
past the end (empty) and of a stream that does not exist (a clear error). Exactly
once: no id twice, none missing.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from mwcore.archive.spark.source import read_archive
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics, topic_name
from testbed.wire import source_writer
from tests.conftest import ROOT

pytestmark = pytest.mark.spark

N = 4_000


@pytest.fixture(scope="module")
def archive(stack: LocalStack, registry: SchemaRegistry) -> dict[str, Any]:
    ns = f"arch{random.randrange(10**6)}"
    topic = topic_name(ns, "numbers")
    ensure_topics(stack.bootstrap, {topic: 4})
    rng = random.Random(5)
    writer = source_writer(stack, registry, topic, "mw.examples.Number")
    written: dict[bytes, tuple[int, int]] = {}  # id -> (n, timestamp)
    for i in range(N):
        rid = rng.randbytes(16)
        ts = 1_000_000 + i * 10 - rng.randrange(500)  # out of order
        writer.write(f"key-{rng.randrange(100)}", {"n": i}, ts, rid)
        written[rid] = (i, ts)
    bad_id = b"\xee" * 16
    writer.write_raw(b"key-0", b"not avro at all", 1_000_000, bad_id)
    writer.flush()
    return {"ns": ns, "written": written, "bad_id": bad_id, "ends": dict(writer.end_offsets)}


def read(spark: Any, stack: LocalStack, ns: str, **options: str) -> Any:
    return read_archive(spark, stack.bootstrap, "numbers", ns, ROOT / "schemas", **options)


def test_a_whole_stream_is_read_exactly_once(spark: Any, stack: LocalStack, archive: dict[str, Any]) -> None:
    df = read(spark, stack, archive["ns"])
    assert df.rdd.getNumPartitions() == 4  # one per Kafka partition
    cols = set(df.columns)
    assert {"key", "value", "topic", "partition", "offset", "timestamp", "headers", "id", "n"} <= cols
    rows = df.select("id", "n", "timestamp", "decode_error", "value", "partition", "offset").collect()
    ids = [bytes(r["id"]) for r in rows]
    assert len(ids) == len(set(ids)) == N + 1
    written = archive["written"]
    good = {
        bytes(r["id"]): (r["n"], round(r["timestamp"].timestamp() * 1000)) for r in rows if r["n"] is not None
    }
    assert good == written
    (bad,) = [r for r in rows if bytes(r["id"]) == archive["bad_id"]]
    assert (
        bad["n"] is None and "bad marker" in bad["decode_error"] and bytes(bad["value"]) == b"not avro at all"
    )
    per_partition = {p: 0 for p in range(4)}
    for r in rows:
        per_partition[r["partition"]] += 1
    assert per_partition == {p: archive["ends"].get(p, 0) for p in range(4)}


def test_offset_ranges(spark: Any, stack: LocalStack, archive: dict[str, Any]) -> None:
    starting = json.dumps({"numbers": {"0": 10, "1": -2}})
    ending = json.dumps({"numbers": {"0": 30, "2": 5}})
    rows = read(spark, stack, archive["ns"], startingOffsets=starting, endingOffsets=ending)
    got = sorted((r["partition"], r["offset"]) for r in rows.select("partition", "offset").collect())
    ends = archive["ends"]
    want = sorted(
        [(0, o) for o in range(10, 30)]
        + [(1, o) for o in range(ends[1])]
        + [(2, o) for o in range(5)]
        + [(3, o) for o in range(ends[3])]
    )
    assert got == want


def test_time_ranges_are_exact_despite_disorder(
    spark: Any, stack: LocalStack, archive: dict[str, Any]
) -> None:
    lo, hi = 1_010_000, 1_020_000
    df = read(spark, stack, archive["ns"], startingTimestamp=str(lo), endingTimestamp=str(hi))
    got = sorted(r["n"] for r in df.select("n").collect())
    want = sorted(n for n, ts in archive["written"].values() if lo <= ts < hi)
    assert got == want and len(want) > 500


def test_split_partitions_read_each_record_once(
    spark: Any, stack: LocalStack, archive: dict[str, Any]
) -> None:
    df = read(spark, stack, archive["ns"], maxRecordsPerPartition="150")
    assert df.rdd.getNumPartitions() >= N // 150
    ids = [bytes(r["id"]) for r in df.select("id").collect()]
    assert len(ids) == len(set(ids)) == N + 1


def test_ranges_past_the_end_are_empty(spark: Any, stack: LocalStack, archive: dict[str, Any]) -> None:
    assert read(spark, stack, archive["ns"], startingTimestamp="9000000000000").count() == 0
    past = json.dumps({"numbers": {str(p): 10**9 for p in range(4)}})
    assert read(spark, stack, archive["ns"], startingOffsets=past).count() == 0


def test_an_unknown_stream_is_a_clear_error(spark: Any, stack: LocalStack, archive: dict[str, Any]) -> None:
    with pytest.raises(Exception, match=r"no such stream in namespace .*: nothing_here"):
        read_archive(spark, stack.bootstrap, "nothing_here", archive["ns"], ROOT / "schemas")
