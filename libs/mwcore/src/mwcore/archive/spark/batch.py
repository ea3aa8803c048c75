"""Computations over DataFrames: the streaming code, unchanged, in Spark.

``run_computation(df, "module:Class", registry)`` takes records as the archive source
gives them (``stream``, ``key``, ``timestamp``, ``id``, ``value``), groups them by key
(the input's key extractor where it has one) and runs each key through
``mwcore.archive.batch.KeyRunner`` on the executors. The result has the same columns, so
stages chain: the windower's output is the dip detector's input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from mwcore.archive.batch import ARCHIVED, Encoded, KeyRunner
from mwcore.runtime.layout import stream_types
from mwcore.serde.avro import AvroSerde, SchemaRegistry

RECORDS = StructType(
    [
        StructField("stream", StringType(), False),
        StructField("key", StringType(), True),
        StructField("timestamp", LongType(), False),
        StructField("id", BinaryType(), True),
        StructField("value", BinaryType(), True),
    ]
)


def as_records(df: DataFrame) -> DataFrame:
    """The archive source's rows as batch records (timestamps in ms, keys as text)."""
    if dict(df.dtypes).get("timestamp") == "bigint":
        return df.select(*RECORDS.fieldNames())
    return df.select(
        "stream",
        F.col("key").cast("string").alias("key"),
        F.expr("unix_millis(timestamp)").alias("timestamp"),
        "id",
        "value",
    )


def end_of(df: DataFrame) -> int:
    """The watermark at the end of a bounded input: its latest timestamp + 1 ms."""
    latest = as_records(df).agg(F.max("timestamp")).collect()[0][0]
    return 0 if latest is None else int(latest) + 1


def run_computation(
    df: DataFrame, computation: str, registry: SchemaRegistry, end_ms: int | None = None
) -> DataFrame:
    """The productions of ``computation`` (``module:Class``) over the records of ``df``;
    after each key's last record the watermark goes to ``end_ms`` (default: the end of
    ``df``'s data, ``end_of(df)``)."""
    from mwcore.api.computation import load_computation

    cls = load_computation(computation)  # fail here, on the driver, if it does not load
    end = end_of(df) if end_ms is None else end_ms
    extractors = {i.stream for i in cls.inputs if i.key is not None}
    inputs = [i.stream for i in cls.inputs]
    records = as_records(df).where(F.col("stream").isin(inputs))

    def keyed(rows: Iterable[Any]) -> Iterator[tuple[str, Encoded]]:
        comp = load_computation(computation)
        types = stream_types(comp, registry)
        serdes = {
            i.stream: (i.key, AvroSerde(registry, i.schema or "", framing=ARCHIVED)) for i in comp.inputs
        }
        for r in rows:
            key = r["key"]
            if r["stream"] in extractors:
                extract, serde = serdes[r["stream"]]
                try:
                    value = serde.decode(r["value"])
                    if r["stream"] in types:  # the extractor takes the input's type
                        value = types[r["stream"]].read(value)
                    key = extract(value)  # type: ignore[misc]
                except Exception:
                    key = None  # undecodable: the runtime dead-letters it; so does KeyRunner
            value = bytes(r["value"]) if r["value"] is not None else b""
            rid = bytes(r["id"]) if r["id"] is not None else b""
            yield key or "", Encoded(r["stream"], key or "", int(r["timestamp"]), rid, value)

    def run(groups: Iterable[tuple[str, Iterable[Encoded]]]) -> Iterator[tuple[Any, ...]]:
        runner = KeyRunner(load_computation(computation), registry, end)
        for _, recs in groups:
            for e in runner.run_key(recs):
                yield (e.stream, e.key, e.timestamp, e.id, e.value)

    out = records.rdd.mapPartitions(keyed).groupByKey().mapPartitions(run)
    return df.sparkSession.createDataFrame(out, RECORDS)


def decoded(df: DataFrame, stream: str, schema: str, registry: SchemaRegistry) -> list[dict[str, Any]]:
    """A stream of batch records, collected and decoded (for tests and small outputs)."""
    serde = AvroSerde(registry, schema)
    return [serde.decode(bytes(r["value"])) for r in df.where(F.col("stream") == stream).collect()]


def decode_frame(df: DataFrame, stream: str, schema: str, registry: SchemaRegistry) -> DataFrame:
    """One stream of batch records as a DataFrame of its Avro fields, plus the record's
    key, timestamp (ms) and id: columns ``key``, ``timestamp`` and ``id``, or ``_key``,
    ``_timestamp`` and ``_id`` where the schema has a field of that name."""
    from mwcore.archive.spark.types import struct_of, to_row

    fields = struct_of(registry.latest(schema).parsed)
    taken = set(fields.names)

    def meta(name: str) -> str:
        return f"_{name}" if name in taken else name

    head = [
        StructField(meta("key"), StringType(), True),
        StructField(meta("timestamp"), LongType(), False),
        StructField(meta("id"), BinaryType(), True),
    ]
    out_schema = StructType([*head, *fields.fields])

    def rows(it: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        serde = AvroSerde(registry, schema)
        for r in it:
            value = to_row(serde.decode(bytes(r["value"])), fields)
            yield (r["key"], r["timestamp"], r["id"], *value)

    picked = df.where(F.col("stream") == stream).rdd.mapPartitions(rows)
    return df.sparkSession.createDataFrame(picked, out_schema)


def run_pipeline(
    archive: DataFrame, computations: list[str], registry: SchemaRegistry
) -> dict[str, tuple[DataFrame, str]]:
    """Run computations in order, each over the archive plus what the earlier ones
    produced; every output stream with its schema name."""
    from mwcore.api.computation import load_computation

    records = as_records(archive)
    end = end_of(records)  # every stage ends at the end of the archive's data
    outputs: dict[str, tuple[DataFrame, str]] = {}
    for spec in computations:
        produced = run_computation(records, spec, registry, end).cache()
        for o in load_computation(spec).outputs:
            outputs[o.stream] = (produced, o.schema)
        records = records.unionByName(produced)
    return outputs
