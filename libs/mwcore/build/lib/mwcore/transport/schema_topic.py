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
   a writer schema is there once a record that uses it can be read, so one read of
   the end after the record was polled finds it: a worker tells the topic when it
   polls (``polled``), and all the unknown fingerprints of a batch share one read. A
   fingerprint still missing is waited for up to ``wait_s`` (a producer that does not
   publish first), at most once every ``wait_every_s`` whatever the fingerprint, then
   reported unknown: its record is a dead letter. So a stream of records with junk
   fingerprints costs a worker one read per poll and a wait now and then, never a
   wait per record; the fingerprints known to be missing are a bounded set.
3. **Only what matches its key.** Anyone who can write the topic can write anything
   to it. A document is used only if it is a schema (small, valid Avro, no array whose
   items take no bytes) whose fingerprint is its key; others are skipped and counted
   (``transport/rejections.py``). Two different documents under one fingerprint (one
   is forged: the fingerprint is a CRC, easy to collide, and defaults are not part of
   it) are a conflict: the fingerprint's records are dead letters naming it
   (``SchemaConflictError``), never decoded with either.

Two producers that start at the same moment with two versions that are each
compatible with what is there, but not with each other, can both pass step 1; the
check is a guard against mistakes, not a lock.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import structlog
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from mwcore.errors import (
    ConfigError,
    RejectedRecord,
    SchemaConflictError,
    SchemaLookupError,
)
from mwcore.limits import MAX_SCHEMA_BYTES
from mwcore.serde.avro import SchemaRegistry, SchemaVersion
from mwcore.serde.compat import upgrade_refusal
from mwcore.serde.schema_doc import standalone
from mwcore.transport.rejections import REJECTED
from mwcore.transport.topics import consumer_config, ensure_topics, producer_config, topic_name
from mwcore.transport.transient import through_transient

log = structlog.get_logger("mwcore.transport.schema_topic")

SCHEMAS_STREAM = "mw.schemas"
COMPACTED = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1", "segment.ms": "600000"}
_KEY = struct.Struct("<Q")
MAX_MISSING = 10_000  # fingerprints remembered as missing (the oldest forgotten first)


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
        wait_every_s: float = 10.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = schemas_topic(namespace)
        self.wait_s = wait_s
        self.retry_s = retry_s
        self.timeout_s = timeout_s
        self.wait_every_s = wait_every_s
        self.documents: dict[int, Any] = {}  # fingerprint -> document, as read or published
        self.conflicts: dict[int, str] = {}  # fingerprint -> what conflicts (never decoded)
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._next = 0  # the offset after the last record read
        self._exists = False
        self._refreshed = 0.0  # when the end was last read (monotonic)
        self._polled: float | None = None  # when the worker last polled its input (monotonic)
        self._waited = -wait_every_s  # when a lookup last waited for a missing fingerprint
        self._missing: OrderedDict[int, None] = OrderedDict()  # still absent after a lookup

    # -- readers ---------------------------------------------------------------------------

    def polled(self) -> None:
        """The worker has polled its input: a record of this poll may need a schema
        published since the topic was last read."""
        self._polled = time.monotonic()

    def lookup(self, fingerprint: int) -> Any | None:
        """The document published under ``fingerprint``, or None (see the module doc);
        ``SchemaConflictError`` if two different ones were."""
        if fingerprint in self.conflicts:
            raise SchemaConflictError(self.conflicts[fingerprint])
        if fingerprint in self.documents:
            return self.documents[fingerprint]
        now = time.monotonic()
        stale = self._refreshed < self._polled if self._polled is not None else True
        if fingerprint in self._missing:
            if stale and now - self._refreshed >= self.retry_s:
                self.refresh()
            return self._found(fingerprint)
        if stale:
            self.refresh()
        if fingerprint not in self.documents and now - self._waited >= self.wait_every_s:
            self._waited = now  # a producer that did not publish first: wait, now and then
            deadline = now + self.wait_s
            while fingerprint not in self.documents and time.monotonic() < deadline:
                time.sleep(0.05)
                self.refresh()
        if fingerprint not in self.documents:
            self._missing[fingerprint] = None
            while len(self._missing) > MAX_MISSING:
                self._missing.popitem(last=False)
            log.warning("schema_unknown", topic=self.topic, fingerprint=f"{fingerprint:016x}")
            return None
        log.info("schema_learnt", topic=self.topic, fingerprint=f"{fingerprint:016x}")
        return self._found(fingerprint)

    def _found(self, fingerprint: int) -> Any | None:
        if fingerprint in self.conflicts:
            raise SchemaConflictError(self.conflicts[fingerprint])
        return self.documents.get(fingerprint)

    def refresh(self) -> None:
        """Read the topic to its end as of now (nothing if it does not exist yet).
        ``SchemaLookupError`` if that cannot be done within ``timeout_s``."""
        self._refreshed = time.monotonic()
        try:
            consumer = self._reader()
            if consumer is None:
                return
            tp = TopicPartition(self.topic, 0)
            deadline = time.monotonic() + self.timeout_s
            _, end = through_transient(  # a leader moving (a broker died) is asked again
                lambda left: consumer.get_watermark_offsets(tp, timeout=left, cached=False), self.timeout_s
            )
            while self._next < end:
                if time.monotonic() > deadline:
                    raise SchemaLookupError(f"could not read {self.topic} to its end in {self.timeout_s}s")
                for m in consumer.consume(1000, 0.1):
                    if m.error() is None:
                        try:
                            self.take(m.key(), m.value())
                        except RejectedRecord as why:
                            REJECTED.reject(self.topic, m.partition() or 0, m.offset() or 0, why)
                        self._next = max(self._next, (m.offset() or 0) + 1)
                [pos] = consumer.position([tp])
                self._next = max(self._next, pos.offset)  # past records compacted away
        except KafkaException as exc:
            raise SchemaLookupError(f"cannot read {self.topic}: {exc}") from exc
        for fp in self.documents.keys() & self._missing.keys():
            del self._missing[fp]

    def take(self, key: bytes | None, value: bytes | None) -> None:
        """Take one record of the topic (``RejectedRecord`` if it cannot be used)."""
        if key is None or len(key) != _KEY.size:
            raise RejectedRecord("bad_key", "not an 8-byte fingerprint")
        if not value:
            return  # a tombstone: nothing to learn
        if len(value) > MAX_SCHEMA_BYTES:
            raise RejectedRecord("too_large", f"{len(value)} bytes")
        (fp,) = _KEY.unpack(key)
        try:
            document = json.loads(value)
            SchemaRegistry().add_writer(document, fp)  # a schema, and the key's
        except (ValueError, RecursionError):
            raise RejectedRecord("not_json", f"fingerprint {fp:016x}") from None
        except ConfigError as exc:
            raise RejectedRecord("not_its_schema", f"fingerprint {fp:016x}: {exc}") from None
        known = self.documents.get(fp)
        if known is not None and _canonical(known) != _canonical(document):
            self.conflicts[fp] = (
                f"two different documents were published under writer fingerprint {fp:016x} "
                f"on {self.topic}: refused (one of them is forged)"
            )
            raise RejectedRecord("conflict", f"fingerprint {fp:016x}")
        self.documents[fp] = document

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
            if registry.knows(fp) or fp in self.conflicts:
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


def _canonical(document: Any) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"))
