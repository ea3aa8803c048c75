"""``spark.read.format("mw")``: archived streams as a DataFrame (PySpark 4 Python data
source API; no JVM Kafka connector needed). ``df.write.format("mw")`` appends a
DataFrame to a stream (see ``sink``).

    from mwcore.spark import register
    register(spark)
    df = (spark.read.format("mw")
          .option("bootstrap", "localhost:29092")     # compose; `mw up` prints its own
          .option("streams", "window_counts")            # one or more, comma-separated
          .option("startingTimestamp", "1700000000000")  # optional, ms, inclusive
          .option("endingTimestamp", "1700000600000")    # optional, ms, exclusive
          .load())

Columns: those of Spark's Kafka source (``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, ``headers``), then ``stream``, ``id``
(the record id; for a record written without one, the id the runtime gives it),
``decode_error`` (why a value could not be decoded, else null; nothing is dropped),
then the fields of the decoded Avro value (a field whose name is taken by a column
above is called ``value_<name>``).

Options: ``bootstrap`` (default ``$MW_BOOTSTRAP``), ``namespace`` (``default``),
``streams`` (or ``stream``), ``schemasDir`` (default ``$MW_SCHEMAS_DIR`` or the nearest
``schemas/``), ``avroSchema`` (the reader schema; default: the writer schema of the
first record), ``startingOffsets`` / ``endingOffsets`` (``earliest`` / ``latest`` or JSON
``{"stream": {"0": 42}}``, as in Spark's Kafka source, end exclusive),
``startingTimestamp`` / ``endingTimestamp``, ``maxRecordsPerPartition`` (split
partitions larger than this; default 1,000,000), ``decode`` (``true``).

The read stops at the end of the data as it was when the job was planned. One Spark
partition per Kafka partition (more when split).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from mwcore.archive import Range, Slice, plan, read_slice
from mwcore.errors import ConfigError
from mwcore.ids import ID_BYTES, from_position
from mwcore.record import ID_HEADER
from mwcore.serde import _FP, HEADER_LEN, MAGIC, AvroSerde, SchemaRegistry
from mwcore.spark.types import struct_of

BATCH_ROWS = 8192  # rows per Arrow batch handed to Spark

KAFKA_COLUMNS = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), False),
        StructField(
            "headers",
            ArrayType(
                StructType(
                    [StructField("key", StringType(), False), StructField("value", BinaryType(), True)]
                )
            ),
            True,
        ),
        StructField("stream", StringType(), False),
        StructField("id", BinaryType(), True),
        StructField("decode_error", StringType(), True),
    ]
)


def register(spark: SparkSession) -> None:
    spark.dataSource.register(ArchiveDataSource)


def read_archive(
    spark: SparkSession,
    bootstrap: str,
    streams: str,
    namespace: str = "default",
    schemas_dir: Path | str | None = None,
    **options: str,
) -> DataFrame:
    """``spark.read.format("mw")`` with the usual options set (``options``: any other
    option of the source, e.g. ``startingTimestamp="..."``, ``decode="false"``)."""
    reader = (
        spark.read.format("mw")
        .option("bootstrap", bootstrap)
        .option("namespace", namespace)
        .option("streams", streams)
    )
    if schemas_dir is not None:
        reader = reader.option("schemasDir", str(schemas_dir))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _offsets(raw: str | None, default: str, streams: list[str], namespace: str) -> dict[str, dict[int, int]]:
    """Spark's offset JSON (``{"stream": {"0": 42}}``, -2 earliest, -1 latest); stream
    or topic names."""
    if raw is None or raw.strip() in ("", default):
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise ConfigError(
            f'offsets {raw!r}: expected {default!r} or JSON like {{"stream": {{"0": 42}}}}'
        ) from None
    out: dict[str, dict[int, int]] = {}
    prefix = "" if namespace == "default" else f"{namespace}."
    for name, parts in data.items():
        stream = name[len(prefix) :] if prefix and name.startswith(prefix) else name
        if stream not in streams:
            raise ConfigError(f"offsets name {name!r}, which is not among the streams read ({streams})")
        out[stream] = {int(p): int(o) for p, o in parts.items()}
    return out


def _schemas_dir(option: str | None) -> Path:
    if option:
        return Path(option)
    if os.environ.get("MW_SCHEMAS_DIR"):
        return Path(os.environ["MW_SCHEMAS_DIR"])
    from mwcore.testing import find_schemas

    return find_schemas()


class ArchiveDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "mw"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        opts = {k.lower(): v for k, v in options.items()}
        self.bootstrap = opts.get("bootstrap") or os.environ.get("MW_BOOTSTRAP", "")
        if not self.bootstrap:
            raise ConfigError("option bootstrap (or MW_BOOTSTRAP) is required")
        self.namespace = opts.get("namespace", "default")
        raw = opts.get("streams") or opts.get("stream") or opts.get("subscribe") or ""
        self.streams = [s.strip() for s in raw.split(",") if s.strip()]
        if not self.streams:
            raise ConfigError("option streams is required (one or more stream names, comma-separated)")
        self.registry = SchemaRegistry.from_directory(_schemas_dir(opts.get("schemasdir")))
        self.opts = opts
        self._planned = False

    def _plan(self) -> None:
        """Plan a read (only reads need it: a write does not look at what is there)."""
        if self._planned:
            return
        self._planned = True
        opts = self.opts
        self.range = Range(
            starting=_offsets(opts.get("startingoffsets"), "earliest", self.streams, self.namespace),
            ending=_offsets(opts.get("endingoffsets"), "latest", self.streams, self.namespace),
            from_ms=int(opts["startingtimestamp"]) if opts.get("startingtimestamp") else None,
            to_ms=int(opts["endingtimestamp"]) if opts.get("endingtimestamp") else None,
        )
        self.split = int(opts.get("maxrecordsperpartition", 1_000_000))
        self.decode = opts.get("decode", "true").lower() != "false"
        self.slices = plan(self.bootstrap, self.streams, self.range, self.namespace, self.split)
        self.avro_schema = opts.get("avroschema") or (self._first_writer() if self.decode else None)

    def _first_writer(self) -> str | None:
        """The writer schema of the first readable record of the read (None: no data)."""
        for piece in self.slices:
            for m in read_slice(self.bootstrap, piece):
                data = m.value() or b""
                if len(data) >= HEADER_LEN and data[:2] == MAGIC:
                    (fp,) = _FP.unpack_from(data, 2)
                    try:
                        return self.registry.by_fingerprint(fp).name
                    except Exception:
                        continue
            break
        return None

    def schema(self) -> StructType:
        self._plan()
        fields = list(KAFKA_COLUMNS.fields)
        if self.avro_schema:
            taken = {f.name for f in fields}
            for f in struct_of(self.registry.latest(self.avro_schema).parsed).fields:
                name = f"value_{f.name}" if f.name in taken else f.name
                fields.append(StructField(name, f.dataType, True))
        return StructType(fields)

    def reader(self, schema: StructType) -> DataSourceReader:
        self._plan()
        return ArchiveReader(self, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from mwcore.spark.sink import StreamWriter

        if overwrite:
            raise ConfigError("a stream is append-only: write with mode('append')")
        if len(self.streams) != 1:
            raise ConfigError(f"write to one stream (option stream), not {self.streams}")
        return StreamWriter(self.bootstrap, self.namespace, self.streams[0], self.registry, self.opts, schema)


class SlicePartition(InputPartition):
    def __init__(self, piece: Slice) -> None:
        super().__init__(piece)
        self.piece = piece


class ArchiveReader(DataSourceReader):
    def __init__(self, source: ArchiveDataSource, schema: StructType) -> None:
        self.bootstrap = source.bootstrap
        self.slices = source.slices
        self.range = source.range
        self.registry = source.registry  # shipped to the executors with the reader
        self.avro_schema = source.avro_schema
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        return [SlicePartition(s) for s in self.slices] or [SlicePartition(Slice("", "", 0, 0, 0))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of ``BATCH_ROWS`` rows (column by column: far cheaper than
        handing Spark a tuple per row)."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        piece: Slice = partition.piece  # type: ignore[attr-defined]
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        # the generated codec for the reader schema's own writer, fastavro resolution otherwise
        serde = AvroSerde(self.registry, self.avro_schema) if self.avro_schema else None
        decoded = [f["name"] for f in serde.schema.parsed["fields"]] if serde is not None else []
        keeps = self.range.keeps
        cols: list[list[Any]] = [[] for _ in arrow_schema.names]
        (c_key, c_value, c_topic, c_part, c_off, c_ts, c_tstype, c_headers, c_stream, c_id, c_error) = cols[
            :11
        ]
        c_fields = cols[11:]
        nulls = (None,) * len(decoded)
        for m in read_slice(self.bootstrap, piece):
            ts_type, ts = m.timestamp()
            if not keeps(ts):
                continue
            headers: list[Any] = list(m.headers() or [])
            data = m.value()
            c_key.append(m.key())
            c_value.append(data)
            c_topic.append(piece.topic)
            c_part.append(piece.partition)
            c_off.append(m.offset())
            c_ts.append(ts * 1000)
            c_tstype.append(ts_type - 1 if ts_type else -1)
            c_headers.append([{"key": k, "value": v} for k, v in headers])
            c_stream.append(piece.stream)
            rid = next((v for k, v in headers if k == ID_HEADER), None)
            if not isinstance(rid, bytes) or len(rid) != ID_BYTES:  # as the runtime names it
                rid = from_position(piece.topic, piece.partition, m.offset() or 0)
            c_id.append(rid)
            if serde is None:
                c_error.append(None)
            else:
                error, values = None, nulls
                try:
                    if data is None:
                        raise ValueError("no value")
                    value: Any = serde.decode(data)
                    values = tuple(value.get(name) for name in decoded)
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
                c_error.append(error)
                for col, v in zip(c_fields, values, strict=True):
                    col.append(v)
            if len(c_off) >= BATCH_ROWS:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(c, type=f.type) for c, f in zip(cols, arrow_schema, strict=True)],
                    schema=arrow_schema,
                )
                for c in cols:
                    c.clear()
        if c_off:
            yield pa.RecordBatch.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(cols, arrow_schema, strict=True)],
                schema=arrow_schema,
            )
