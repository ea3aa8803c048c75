"""Archived streams as a DataFrame: ``read_archive``, on Spark's own Kafka source
(``spark-sql-kafka-0-10``, in every session ``mwcore.archive.spark.session`` makes), with what
the kit needs on top: the record id, the Avro value decoded, exact time ranges.

    from mwcore.archive.spark.source import read_archive
    df = read_archive(spark, "localhost:29092", "window_counts",   # one or more streams
                      startingTimestamp="1700000000000",           # optional, ms, inclusive
                      endingTimestamp="1700000600000")             # optional, ms, exclusive

Columns: those of Spark's Kafka source (``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, ``headers``), then ``stream``, ``id``
(the record id; for a record written without one, the id the runtime gives it),
``decode_error`` (why a value could not be decoded, else null; nothing is dropped),
then the fields of the decoded Avro value (a field whose name is taken by a column
above is called ``value_<name>``). A record re-sent after a crash is there twice with
one id: ``dropDuplicates(["id"])`` where that matters.

Options: ``avroSchema`` (the reader schema; default: the writer schema of the first
record), ``startingOffsets`` / ``endingOffsets`` (``earliest`` / ``latest`` or JSON
``{"stream": {"0": 42}}``, as in Spark's Kafka source, end exclusive),
``startingTimestamp`` / ``endingTimestamp``, ``maxRecordsPerPartition`` (split Kafka
partitions larger than this into several Spark partitions; default 1,000,000),
``decode`` (``true``), ``schemasDir``, ``schemaRegistryUrl`` (default
``MW_SCHEMA_REGISTRY_URL``: values in the Confluent framing name their schemas by its
ids, which the driver reads for the executors; both framings are read), and any
``kafka.*`` option of Spark's Kafka source (security settings, for example).

The read is planned on the driver: each partition's end is fixed as of the call (a
job reads a snapshot while producers go on), a time range starts at the broker's
``offsets_for_times`` answer and every record is then filtered by its timestamp (a
later record in a partition may be older), see ``mwcore.transport.archive``.

``df.write.format("mw")`` appends a DataFrame to a stream (see ``sink``); the ``mw``
format reads nothing (Spark's Kafka source is faster: CHANGELOG.md, measured history).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter
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

from mwcore.api.ids import ID_BYTES, from_position
from mwcore.api.record import ID_HEADER
from mwcore.archive.spark.types import struct_of
from mwcore.errors import ConfigError
from mwcore.process.settings import CommandSettings
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.framing import Framing, frame_of
from mwcore.transport.archive import Range, Slice, bounds, read_slice
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.transport.topics import topic_name

KAFKA_COLUMNS = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)])
            ),
            True,
        ),
    ]
)
KIT_COLUMNS = [
    StructField("stream", StringType(), True),
    StructField("id", BinaryType(), True),
    StructField("decode_error", StringType(), True),
]


def register(spark: SparkSession) -> None:
    spark.dataSource.register(ArchiveDataSource)


def take_writers(
    registry: SchemaRegistry,
    bootstrap: str,
    namespace: str,
    streams: list[str],
    registry_url: str | None = None,
) -> None:
    """Every writer schema of ``streams`` into ``registry``, for executors that decode
    offline: those of the namespace's schemas topic, and by id those of the streams'
    subjects in the schema registry (``registry_url``, else ``MW_SCHEMA_REGISTRY_URL``;
    none: single-object streams only)."""
    schemas = SchemaTopic(bootstrap, namespace)
    try:
        schemas.learn_all(registry)
    finally:
        schemas.close()
    registry_url = registry_url or CommandSettings.load().schema_registry_url
    if registry_url:
        client = RegistryClient(RegistryAccess(registry_url))
        registry.use_ids(client)
        client.learn_subjects(registry, [topic_name(namespace, n) for n in streams])


def read_archive(
    spark: SparkSession,
    bootstrap: str,
    streams: str,
    namespace: str = "default",
    schemas_dir: Path | str | None = None,
    **options: str,
) -> DataFrame:
    """The archived records of ``streams`` (comma-separated), see the module's doc."""
    opts = {k.lower(): v for k, v in options.items()}
    names = [s.strip() for s in streams.split(",") if s.strip()]
    if not names:
        raise ConfigError("no stream to read: name one or more, comma-separated")
    if not bootstrap:
        raise ConfigError("no Kafka bootstrap servers given (MW_BOOTSTRAP)")
    registry = SchemaRegistry.from_directory(_schemas_dir(opts.get("schemasdir") or schemas_dir))
    take_writers(registry, bootstrap, namespace, names, opts.get("schemaregistryurl"))
    what = Range(
        starting=_offsets(opts.get("startingoffsets"), "earliest", names, namespace),
        ending=_offsets(opts.get("endingoffsets"), "latest", names, namespace),
        from_ms=int(opts["startingtimestamp"]) if opts.get("startingtimestamp") else None,
        to_ms=int(opts["endingtimestamp"]) if opts.get("endingtimestamp") else None,
    )
    slices = bounds(bootstrap, names, what, namespace)  # Spark splits them (maxRecordsPerPartition)
    decode = opts.get("decode", "true").lower() != "false"
    avro_schema = opts.get("avroschema") or (_first_writer(bootstrap, registry, slices) if decode else None)
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for piece in slices:
        starting.setdefault(piece.topic, {})[str(piece.partition)] = piece.start
        ending.setdefault(piece.topic, {})[str(piece.partition)] = piece.end
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(starting))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        .option("maxRecordsPerPartition", opts.get("maxrecordsperpartition", "1000000"))
    )
    for k, v in options.items():
        if k.lower().startswith("kafka.") and k.lower() != "kafka.bootstrap.servers":
            reader = reader.option(k, v)
    df = reader.load()
    if what.from_ms is not None:
        df = df.where(f"unix_millis(timestamp) >= {what.from_ms}")
    if what.to_ms is not None:
        df = df.where(f"unix_millis(timestamp) < {what.to_ms}")
    decoder = Decoder(registry, avro_schema, "" if namespace == "default" else f"{namespace}.")
    return df.mapInArrow(decoder, decoder.schema)


class Decoder:
    """Adds ``stream``, ``id``, ``decode_error`` and the decoded fields to Arrow batches
    of Kafka-source rows (run by ``mapInArrow`` on the executors; the kit's generated
    Avro codec for the reader schema's own writer, fastavro resolution otherwise)."""

    def __init__(self, registry: SchemaRegistry, avro_schema: str | None, prefix: str) -> None:
        self.registry = registry
        self.avro_schema = avro_schema
        self.prefix = prefix
        fields = list(KAFKA_COLUMNS.fields) + KIT_COLUMNS
        self.decoded: list[str] = []
        if avro_schema:
            taken = {f.name for f in fields}
            for f in struct_of(registry.latest(avro_schema).parsed).fields:
                self.decoded.append(f.name)
                name = f"value_{f.name}" if f.name in taken else f.name
                fields.append(StructField(name, f.dataType, True))
        self.schema = StructType(fields)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        out_schema = to_arrow_schema(self.schema, timezone="UTC")
        # history spans framings (a migration): both are read, the registry's ids learnt on the driver
        framing = Framing("single-object", read_also="confluent")
        serde = AvroSerde(self.registry, self.avro_schema, framing=framing) if self.avro_schema else None
        n_given = len(KAFKA_COLUMNS.fields)  # passed on as Spark gives them
        first = n_given + len(KIT_COLUMNS)
        # the decoded values, converted to Arrow in one call (a struct per row)
        value_type = pa.struct(
            [pa.field(name, out_schema.field(first + i).type) for i, name in enumerate(self.decoded)]
        )
        for batch in batches:
            errors: list[str | None] = [None] * batch.num_rows
            fields: list[Any] = []
            if serde is not None:
                decode = serde.decode
                rows: list[Any] = []
                for i, data in enumerate(batch.column("value").to_pylist()):
                    try:
                        if data is None:
                            raise ValueError("no value")
                        rows.append(decode(data))
                    except Exception as exc:
                        rows.append(None)
                        errors[i] = f"{type(exc).__name__}: {exc}"
                values = pa.array(rows, type=value_type)
                fields = values.flatten()  # a row that did not decode: null in every field
            made = [self._streams(batch), self._ids(batch), pa.array(errors, pa.string()), *fields]
            arrays = [batch.column(f.name) for f in KAFKA_COLUMNS.fields] + made
            typed = [
                a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, out_schema, strict=True)
            ]
            yield pa.RecordBatch.from_arrays(typed, schema=out_schema)

    def _streams(self, batch: Any) -> Any:
        import pyarrow.compute as pc

        topics = batch.column("topic")
        return pc.utf8_slice_codeunits(topics, len(self.prefix)) if self.prefix else topics

    @staticmethod
    def _ids(batch: Any) -> Any:
        """Each row's id header (16 bytes), vectorised; where a row has none (a foreign
        producer's record), the id the runtime gives it."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        headers = batch.column("headers")
        flat = pc.list_flatten(headers)
        rows = pc.list_parent_indices(headers)
        values = flat.field("value")
        is_id = pc.and_(pc.equal(flat.field("key"), ID_HEADER), pc.equal(pc.binary_length(values), ID_BYTES))
        with_id = pc.filter(rows, is_id).to_numpy()
        found = pc.filter(values, is_id)
        n = batch.num_rows
        if len(with_id) == n and np.array_equal(with_id, np.arange(n)):
            return found.cast(pa.binary())  # one id per row, in order: the usual case
        ids: list[bytes | None] = [None] * n
        for row, rid in zip(with_id.tolist(), found.to_pylist(), strict=True):
            if ids[row] is None:
                ids[row] = rid
        missing = [i for i, rid in enumerate(ids) if rid is None]
        if missing:
            topics, parts, offsets = (batch.column(c).to_pylist() for c in ("topic", "partition", "offset"))
            for i in missing:
                ids[i] = from_position(topics[i], parts[i], offsets[i])
        return pa.array(ids, pa.binary())


def _first_writer(bootstrap: str, registry: SchemaRegistry, slices: list[Slice]) -> str | None:
    """The writer schema of the first readable record of the read (None: no data)."""
    for piece in slices:
        if piece.size <= 0:
            continue
        for m in read_slice(bootstrap, piece):
            frame = frame_of(m.value() or b"")
            if frame is not None:
                try:
                    return registry.writer_of(frame).name
                except Exception:
                    continue
        break
    return None


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


def _schemas_dir(option: Path | str | None) -> Path:
    """The option, else ``MW_SCHEMAS_DIR``, else the project's ``schemas/``."""
    if option:
        return Path(option)
    fallback = CommandSettings.load().schemas_dir
    if fallback is not None:
        return fallback
    from mwcore.serde.avro import find_schemas

    return find_schemas()


class ArchiveDataSource(DataSource):
    """``df.write.format("mw")``: see ``sink``."""

    @classmethod
    def name(cls) -> str:
        return "mw"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        opts = {k.lower(): v for k, v in options.items()}
        self.bootstrap = opts.get("bootstrap") or CommandSettings.load().bootstrap or ""
        if not self.bootstrap:
            raise ConfigError("option bootstrap (or MW_BOOTSTRAP) is required")
        self.namespace = opts.get("namespace", "default")
        raw = opts.get("streams") or opts.get("stream") or ""
        self.streams = [s.strip() for s in raw.split(",") if s.strip()]
        self.opts = opts

    def schema(self) -> StructType:
        raise ConfigError(
            'format("mw") only writes: read archived streams with '
            "mwcore.archive.spark.source.read_archive (Spark's Kafka source underneath)"
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        self.schema()
        raise AssertionError("unreachable")

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from mwcore.archive.spark.sink import StreamWriter

        if overwrite:
            raise ConfigError("a stream is append-only: write with mode('append')")
        if len(self.streams) != 1:
            raise ConfigError(f"write to one stream (option stream), not {self.streams}")
        registry = SchemaRegistry.from_directory(_schemas_dir(self.opts.get("schemasdir")))
        return StreamWriter(self.bootstrap, self.namespace, self.streams[0], registry, self.opts, schema)
