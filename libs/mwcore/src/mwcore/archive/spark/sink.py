"""``df.write.format("mw")``: a DataFrame appended to a stream, as records the
runtime reads exactly once.

    (profiles.write.format("mw").mode("append")
        .option("bootstrap", "localhost:29092")     # compose; `mw up` prints its own
        .option("stream", "model_updates")
        .option("avroSchema", "zeitgeist.ModelUpdate")
        .save())

Each row becomes one record: its value the row's columns named as the Avro schema's
fields, its key the ``keyColumn`` (default ``key``), its timestamp the
``timestampColumn`` (default ``timestamp``: ms or a Spark timestamp), its record id
the ``idColumn`` (default ``id``: 16 bytes as they are, any other value hashed to 16
bytes; where missing or null, an id derived from the stream, key, timestamp and
encoded value, so the same row always has the same id).
A task Spark retries sends its rows again with the same ids, and every consumer
drops the repeats: the write is exactly-once for the computations that read the
stream. The topic is created when missing, with ``partitions`` (default 4)
partitions, partitioned by key as the runtime's producers do. Values are framed as
``wire`` says (default ``MW_WIRE``; ``confluent``: the schema registered under the
stream's subject in the registry at ``schemaRegistryUrl``, default
``MW_SCHEMA_REGISTRY_URL``), see ``mwcore.serde.framing``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import SecretStr
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from mwcore.api.ids import ID_BYTES
from mwcore.api.record import ID_HEADER
from mwcore.api.signing import MAC_HEADER, Signer
from mwcore.errors import ConfigError
from mwcore.process.settings import CommandSettings
from mwcore.serde.avro import SchemaRegistry
from mwcore.serde.framing import Framing, check_wire
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient, registered_framings
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.transport.topics import ensure_topics, partition_counts, topic_name


@dataclass
class Written(WriterCommitMessage):
    records: int


def content_id(stream: str, key: bytes, timestamp: int, value: bytes) -> bytes:
    payload = stream.encode() + b"\x00" + key + b"\x00" + timestamp.to_bytes(8, "big", signed=True) + value
    return hashlib.blake2b(payload, digest_size=ID_BYTES, person=b"mw-content").digest()


def _millis(ts: Any) -> int:
    if isinstance(ts, datetime):
        return int(ts.timestamp() * 1000)
    return int(ts)


def _key_bytes(key: Any) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, bytes | bytearray):
        return bytes(key)
    return str(key).encode()


def _record_id(value: Any) -> bytes | None:
    """An id column's value as a record id: 16 bytes as they are; anything else
    (text, a number, other lengths) hashed to 16 bytes, so equal values keep equal ids."""
    if value is None:
        return None
    raw = bytes(value) if isinstance(value, bytes | bytearray) else repr(value).encode()
    if len(raw) == ID_BYTES and isinstance(value, bytes | bytearray):
        return raw
    return hashlib.blake2b(raw, digest_size=ID_BYTES, person=b"mw-id-col").digest()


class StreamWriter(DataSourceWriter):
    def __init__(
        self,
        bootstrap: str,
        namespace: str,
        stream: str,
        registry: SchemaRegistry,
        opts: dict[str, str],
        schema: StructType,
    ) -> None:
        self.bootstrap = bootstrap
        self.stream = stream
        self.topic = topic_name(namespace, stream)
        self.registry = registry
        self.avro_schema = opts.get("avroschema") or ""
        if not self.avro_schema:
            raise ConfigError(
                "option avroSchema is required to write (the schema name, e.g. zeitgeist.ModelUpdate)"
            )
        fields = [f["name"] for f in registry.latest(self.avro_schema).parsed["fields"]]
        columns = set(schema.fieldNames())
        self.key_col = opts.get("keycolumn", "key")
        self.ts_col = opts.get("timestampcolumn", "timestamp")
        self.id_col = opts.get("idcolumn", "id")
        missing = [c for c in (*fields, self.key_col, self.ts_col) if c not in columns]
        if missing:
            raise ConfigError(
                f"writing {stream} ({self.avro_schema}): the DataFrame has no column {', '.join(missing)}"
            )
        self.fields = fields
        self.has_id = self.id_col in columns
        # the pipeline secret, for the tasks to sign the ids with (option idSecret, else
        # MW_ID_SECRET where the job runs): readers of a secured pipeline check them
        settings = CommandSettings.load()
        secret = opts.get("idsecret") or settings.id_secret
        self.secret = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
        partitions = int(opts.get("partitions", 4))
        existing = partition_counts(bootstrap, [self.topic]).get(self.topic)
        ensure_topics(bootstrap, {self.topic: existing or partitions})
        schemas = SchemaTopic(bootstrap, namespace)  # before any task writes with it
        try:
            schemas.publish([registry.latest(self.avro_schema)])
        finally:
            schemas.close()
        self.framing = self._framing(opts, settings)

    def _framing(self, opts: dict[str, str], settings: CommandSettings) -> Framing:
        """The stream's framing, registered on the driver (the tasks only frame with it)."""
        wire = check_wire(opts.get("wire", settings.wire), "option wire")
        url = opts.get("schemaregistryurl") or settings.schema_registry_url
        client = None if url is None else RegistryClient(RegistryAccess(url))
        sv = self.registry.latest(self.avro_schema)
        where = f"writing {self.stream} ({self.avro_schema})"
        return registered_framings(where, client, {self.topic: (wire, None)}, {self.topic: sv})[self.topic]

    def write(self, iterator: Iterator[Row]) -> Written:
        from mwcore.serde.avro import AvroSerde
        from mwcore.transport.producer import Sender

        serde = AvroSerde(self.registry, self.avro_schema, framing=self.framing)
        sender = Sender(self.bootstrap)
        signer = Signer(self.secret)
        errors: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        n = 0
        for row in iterator:
            data = row.asDict(recursive=True)
            value = serde.encode({f: data[f] for f in self.fields})
            key = _key_bytes(data[self.key_col])
            ts = _millis(data[self.ts_col])
            rid = _record_id(data.get(self.id_col) if self.has_id else None)
            if rid is None:
                rid = content_id(self.stream, key or b"", ts, value)
            headers: list[tuple[str, str | bytes | None]] = [(ID_HEADER, rid)]
            if signer.enabled:
                headers.append((MAC_HEADER, signer.sign_record(rid, self.topic, key, value)))
            sender.send(self.topic, value, key, timestamp=ts, headers=headers, on_delivery=delivered)
            sender.poll(0)
            n += 1
        left = sender.flush(60)
        if left or errors:
            raise RuntimeError(f"writing {self.topic}: {left} records unsent, errors: {errors[:3]}")
        return Written(n)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to finish: every record is in Kafka once its task has succeeded."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records of failed tasks may be in Kafka; a retry re-sends the same ids."""
