"""The schemas topic: every writer schema, where every reader can find it.

One compacted topic per namespace, ``mw.schemas`` (``<ns>.mw.schemas`` outside the
default namespace), one partition. Key: the 8 bytes that follow the marker in a
message (the writer schema's CRC-64-AVRO fingerprint, little-endian); value: the
schema as one self-contained JSON document (``schema_doc``: defaults, docs and its
``version`` kept). Keys are content addresses, so compaction keeps every schema
ever published, and publishing one twice changes nothing.

1. **Publish before producing.** Every producer (a worker for its outputs, its dead
   letters and its Avro state, an injector, a replay, a Spark write) calls
   ``publish`` at start with the schemas it writes. Those the topic does not have
   yet are first checked against every version of the same named schema already
   there (``schema_compat``: each must read the other, so a rolling upgrade works in
   either order); an incompatible one is refused with a ``ConfigError`` naming the
   rule, and nothing is published. The rest are sent and the broker's
   acknowledgement awaited (``acks=all``), so a record's writer schema is always on
   the topic before the record is.
2. **Look up on an unknown fingerprint.** ``lookup`` (the registry's
   ``SchemaSource``) reads the topic to its end and caches what it read. By step 1
   a writer schema is there once a record that uses it can be read; a fingerprint
   still missing is retried for ``wait_s`` (a producer that does not publish first),
   then reported unknown: its record is a dead letter. A fingerprint known to be
   missing costs at most one read of the topic's end per ``retry_s``.

Two producers that start at the same moment with two versions that are each
compatible with what is there, but not with each other, can both pass step 1; the
check is a guard against mistakes, not a lock.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Iterable
from typing import Any

import structlog
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from mwcore.errors import ConfigError, SchemaLookupError
from mwcore.serde.avro import SchemaRegistry, SchemaVersion
from mwcore.serde.compat import upgrade_refusal
from mwcore.serde.schema_doc import standalone
from mwcore.transport.topics import consumer_config, ensure_topics, producer_config, topic_name

log = structlog.get_logger("mwcore.transport.schema_topic")

SCHEMAS_STREAM = "mw.schemas"
COMPACTED = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1", "segment.ms": "600000"}
_KEY = struct.Struct("<Q")


def schemas_topic(namespace: str) -> str:
    return topic_name(namespace, SCHEMAS_STREAM)


class SchemaTopic:
    """A namespace's schemas topic: ``publish`` for producers, ``lookup`` for readers.

    Clients are made on first use, so building one costs nothing offline."""

    def __init__(
        self,
        bootstrap: str,
        namespace: str = "default",
        *,
        wait_s: float = 1.0,
        retry_s: float = 1.0,
        timeout_s: float = 30.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = schemas_topic(namespace)
        self.wait_s = wait_s
        self.retry_s = retry_s
        self.timeout_s = timeout_s
        self.documents: dict[int, Any] = {}  # fingerprint -> document, as read or published
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._next = 0  # the offset after the last record read
        self._exists = False
        self._refreshed = 0.0  # when the end was last read (monotonic)
        self._missing: set[int] = set()  # fingerprints still absent after a full wait

    # -- readers ---------------------------------------------------------------------------

    def lookup(self, fingerprint: int) -> Any | None:
        """The document published under ``fingerprint``, or None (see the module doc)."""
        if fingerprint in self.documents:
            return self.documents[fingerprint]
        if fingerprint in self._missing:
            if time.monotonic() - self._refreshed >= self.retry_s:
                self.refresh()
            return self.documents.get(fingerprint)
        self.refresh()
        deadline = time.monotonic() + self.wait_s
        while fingerprint not in self.documents and time.monotonic() < deadline:
            time.sleep(0.05)
            self.refresh()
        if fingerprint not in self.documents:
            self._missing.add(fingerprint)
            log.warning("schema_unknown", topic=self.topic, fingerprint=f"{fingerprint:016x}")
            return None
        log.info("schema_learnt", topic=self.topic, fingerprint=f"{fingerprint:016x}")
        return self.documents[fingerprint]

    def refresh(self) -> None:
        """Read the topic to its end as of now (nothing if it does not exist yet).
        ``SchemaLookupError`` if that cannot be done within ``timeout_s``."""
        self._refreshed = time.monotonic()
        try:
            consumer = self._reader()
            if consumer is None:
                return
            tp = TopicPartition(self.topic, 0)
            _, end = consumer.get_watermark_offsets(tp, timeout=self.timeout_s, cached=False)
            deadline = time.monotonic() + self.timeout_s
            while self._next < end:
                if time.monotonic() > deadline:
                    raise SchemaLookupError(f"could not read {self.topic} to its end in {self.timeout_s}s")
                for m in consumer.consume(1000, 0.1):
                    if m.error() is None:
                        self._read(m.key(), m.value())
                        self._next = max(self._next, (m.offset() or 0) + 1)
                [pos] = consumer.position([tp])
                self._next = max(self._next, pos.offset)  # past records compacted away
        except KafkaException as exc:
            raise SchemaLookupError(f"cannot read {self.topic}: {exc}") from exc
        self._missing -= self.documents.keys()

    def _read(self, key: bytes | None, value: bytes | None) -> None:
        if key is None or len(key) != _KEY.size or not value:
            return
        try:
            self.documents[_KEY.unpack(key)[0]] = json.loads(value)
        except ValueError:
            log.warning("schema_record_invalid", topic=self.topic, key=key.hex())

    def _reader(self) -> Consumer | None:
        if self._consumer is None:
            group = f"mw-schemas-{os.getpid()}-{os.urandom(4).hex()}"  # never joined: assign only
            self._consumer = Consumer(consumer_config(self.bootstrap, group))
        if not self._exists:
            meta = self._consumer.list_topics(self.topic, timeout=self.timeout_s).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return None
            self._exists = True
            self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        return self._consumer

    def learn_all(self, registry: SchemaRegistry) -> int:
        """Add every writer schema on the topic to ``registry`` (a snapshot for readers
        that run offline, such as Spark executors); how many it did not know."""
        self.refresh()
        learnt = 0
        for fp, document in self.documents.items():
            if registry.knows(fp):
                continue
            try:
                registry.add_writer(document, fp)
                learnt += 1
            except ConfigError as exc:
                log.warning("schema_record_invalid", topic=self.topic, error=str(exc))
        return learnt

    # -- producers -------------------------------------------------------------------------

    def publish(self, versions: Iterable[SchemaVersion], *, check: bool = True) -> list[SchemaVersion]:
        """Make sure the topic has each of ``versions`` (step 1 of the module doc); the
        ones it sent. ``check=False`` copies schemas without the compatibility check
        (a replay carrying what its source namespace already accepted)."""
        wanted = {sv.fingerprint: sv for sv in versions}
        if not wanted:
            return []
        ensure_topics(self.bootstrap, {self.topic: 1}, config=COMPACTED)
        self.refresh()
        new = [sv for fp, sv in wanted.items() if fp not in self.documents]
        if check:
            for sv in new:
                self._check(sv)
        if not new:
            return []
        errors: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        producer = self._writer()
        for sv in new:
            value = json.dumps(sv.document, separators=(",", ":")).encode()
            producer.produce(self.topic, value, _KEY.pack(sv.fingerprint), on_delivery=delivered)
        left = producer.flush(self.timeout_s)
        if left or errors:
            raise ConfigError(
                f"could not publish writer schemas to {self.topic}: "
                + (f"{left} unacknowledged after {self.timeout_s}s" if left else errors[0])
            )
        for sv in new:
            self.documents[sv.fingerprint] = sv.document
            log.info(
                "schema_published",
                topic=self.topic,
                schema=sv.name,
                version=sv.version,
                fingerprint=f"{sv.fingerprint:016x}",
            )
        return new

    def _check(self, sv: SchemaVersion) -> None:
        """Refuse ``sv`` if it and an earlier version of its name cannot read each other."""
        earlier: list[SchemaVersion] = []
        for fp, document in self.documents.items():
            if fp != sv.fingerprint and isinstance(document, dict):
                try:
                    old = SchemaRegistry().add_writer(document, fp)
                except ConfigError:
                    continue  # not a schema: nothing to be compatible with
                if old.name == sv.name:
                    earlier.append(old)
        for old in sorted(earlier, key=lambda o: o.version, reverse=True):
            new_label, old_label = f"v{sv.version}", f"v{old.version}"
            if new_label == old_label:  # the same version number edited in place
                new_label += f" ({sv.fingerprint:016x})"
                old_label += f" ({old.fingerprint:016x})"
            old_document = standalone(old.parsed, {})  # names as fastavro normalises them
            refusal = upgrade_refusal(sv.name, new_label, sv.document, old_label, old_document)
            if refusal is not None:
                raise ConfigError(refusal)

    def _writer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(producer_config(self.bootstrap, **{"linger.ms": 0}))
        return self._producer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._producer is not None:
            self._producer.flush(self.timeout_s)
            self._producer = None
