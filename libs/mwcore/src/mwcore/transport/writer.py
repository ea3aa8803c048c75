"""Writing records into a stream from outside the pipeline (injectors, tests, benchmarks).

Each record gets a 16-byte id header: the caller's (derive it from where the record
came from, so a re-sent record keeps its id and is dropped downstream) or a random one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka import Producer

from mwcore.api import ids
from mwcore.api.record import ID_HEADER
from mwcore.api.signing import MAC_HEADER, UNSIGNED, Signer
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.framing import DEFAULT_WIRE, Framing, Wire
from mwcore.transport.schema_registry import RegistryClient, registered_framings
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.transport.topics import producer_config


class SourceWriter:
    """``schemas``: the namespace's schemas topic, to publish the writer schema on before
    the first record, as the kit's producers do (without it, readers must have the
    schema in their own directory). Values are framed ``wire`` (the kit's default,
    ``serde/framing.py``), the schema registered under the topic's subject in
    ``schema_registry`` for ``"confluent"`` (``ConfigError`` without one, or if it refuses
    the schema); or as ``framing`` says where given. ``signer``: with a pipeline secret,
    each record's MAC."""

    def __init__(
        self,
        bootstrap: str,
        registry: SchemaRegistry,
        topic: str,
        schema: str,
        schemas: SchemaTopic | None = None,
        *,
        wire: Wire = DEFAULT_WIRE,
        schema_registry: RegistryClient | None = None,
        framing: Framing | None = None,
        signer: Signer = UNSIGNED,
    ) -> None:
        self.topic = topic
        self.signer = signer
        if framing is None:
            sv = registry.latest(schema)
            where = f"writing {topic}"
            framing = registered_framings(where, schema_registry, {topic: (wire, None)}, {topic: sv})[topic]
        self.serde = AvroSerde(registry, schema, framing=framing)
        if schemas is not None:
            schemas.publish([self.serde.schema])
        self.producer = Producer(producer_config(bootstrap, **{"linger.ms": 20}))
        self.errors = 0
        self.end_offsets: dict[int, int] = {}  # partition -> offset after the last acked record

    def _on_delivery(self, err: object, msg: Any) -> None:
        if err is not None:
            self.errors += 1
            return
        p, off = msg.partition(), msg.offset()
        if off + 1 > self.end_offsets.get(p, 0):
            self.end_offsets[p] = off + 1

    def write(
        self,
        key: str,
        value: Any,
        timestamp: int,
        record_id: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> bytes:
        """Write one record (``headers``: its user headers, after the kit's)."""
        rid = record_id or ids.random_id()
        self.write_raw(key.encode(), self.serde.encode(value), timestamp, rid, headers)
        return rid

    def write_raw(
        self,
        key: bytes | None,
        value: bytes,
        timestamp: int,
        record_id: bytes,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        while True:
            try:
                self.producer.produce(
                    self.topic,
                    value,
                    key,
                    timestamp=timestamp,
                    headers=[*self._headers(key, value, record_id), *headers],
                    on_delivery=self._on_delivery,
                )
                return
            except BufferError:
                self.producer.poll(0.05)

    def _headers(
        self, key: bytes | None, value: bytes, record_id: bytes
    ) -> list[tuple[str, str | bytes | None]]:
        if not self.signer.enabled:
            return [(ID_HEADER, record_id)]
        return [
            (ID_HEADER, record_id),
            (MAC_HEADER, self.signer.sign_record(record_id, self.topic, key, value)),
        ]

    def flush(self, timeout: float = 60) -> None:
        left = self.producer.flush(timeout)
        if left or self.errors:
            raise RuntimeError(f"{left} records unsent, {self.errors} delivery errors")
