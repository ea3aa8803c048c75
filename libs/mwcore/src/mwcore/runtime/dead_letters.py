"""What the runtime produces for input it cannot process: dead letters, and copies of
late records for a computation's late stream.

A dead letter keeps the input as it came (or re-encoded, for a record that decoded but
failed in user code), its source (topic, partition, offset, record id, timestamp), the
error and a short reason (``mw-reason``: ``bad_id``, ``key_too_long``,
``bad_timestamp``, ``undecodable``, ``unknown_schema``, ``schema_conflict``,
``user_code``), in headers. Its id derives from the input's, so a re-run after a crash
produces the same dead letter and consumers drop the copy.

A dead letter must itself be sendable: its key and value together are cut to
``limits.MAX_DEAD_LETTER_BYTES`` (``mw-truncated`` says how large they were), and its
timestamp is the input's only when that is one the broker accepts (not in the future):
otherwise the wall clock at the time.
"""

from __future__ import annotations

from typing import NamedTuple

from mwcore.api import ids
from mwcore.api.record import LATE_HEADER, Production
from mwcore.errors import (
    InternalError,
    InvalidRecord,
    SchemaConflictError,
    SerializationError,
    UnknownSchemaError,
)
from mwcore.limits import MAX_DEAD_LETTER_BYTES
from mwcore.serde.framing import SCHEMA_ID_HEADER
from mwcore.store.checkpoint import TimerEntry

DLQ_INDEX = 0xFFFF_FFFF  # production index of a record's dead letter
LATE_INDEX = 0xFFFF_FFFE  # production index of a late record's copy on the late topic
MAX_ERROR_BYTES = 4000

Headers = tuple[tuple[str, bytes], ...]


class Incoming(NamedTuple):
    """The fields of a consumed Kafka message, read once."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int
    id: bytes
    late: bytes | None  # the injector's mw-late-ms header, if it let the record through late
    schema_id: bytes | None = None  # its __value_schema_id header (confluent-kafka's variant)


def _error(exc: BaseException) -> bytes:
    return f"{type(exc).__name__}: {exc}".encode()[:MAX_ERROR_BYTES]


def _source(topic: str, partition: int, offset: int) -> Headers:
    return (
        ("mw-source-topic", topic.encode()),
        ("mw-source-partition", str(partition).encode()),
        ("mw-source-offset", str(offset).encode()),
    )


def reason(exc: BaseException) -> str:
    """The short reason of a dead letter (``mw-reason``)."""
    if isinstance(exc, InvalidRecord):
        return exc.reason
    if isinstance(exc, SchemaConflictError):
        return "schema_conflict"
    if isinstance(exc, UnknownSchemaError):
        return "unknown_schema"
    if isinstance(exc, SerializationError):
        return "undecodable"
    if isinstance(exc, InternalError):
        return "internal_error"
    return "user_code"


def dead_letter(topic: str, inc: Incoming, exc: BaseException, now_ms: int | None = None) -> Production:
    """The dead letter of an input record, as it came (or re-encoded, if it decoded),
    cut to what can be sent (``now_ms``: the wall clock, for a timestamp the broker
    would refuse)."""
    key, value = inc.key, inc.value
    size = len(key or b"") + len(value)
    headers: list[tuple[str, bytes]] = [
        *_source(inc.topic, inc.partition, inc.offset),
        ("mw-error", _error(exc)),
        ("mw-reason", reason(exc).encode()),
        ("mw-source-id", inc.id),
        ("mw-source-timestamp", str(inc.timestamp).encode()),
    ]
    if inc.schema_id is not None:  # what names the writer schema of a value in the header variant
        headers.append((SCHEMA_ID_HEADER, inc.schema_id))
    if size > MAX_DEAD_LETTER_BYTES:
        headers.append(("mw-truncated", f"key {len(key or b'')} value {len(value)} bytes".encode()))
        key = None if key is None else key[: MAX_DEAD_LETTER_BYTES // 4]
        value = value[: MAX_DEAD_LETTER_BYTES - len(key or b"")]
    ts = max(inc.timestamp, 0)
    if now_ms is not None and ts > now_ms:
        ts = now_ms
    return Production(ids.derive(inc.id, DLQ_INDEX), topic, key, value, ts, tuple(headers))


def refused(topic: str, production: Production, why: str, error: str, now_ms: int) -> Production:
    """A production the broker refuses for good (too large, a timestamp it will not
    take), as a dead letter it takes: its source (topic, id, timestamp), the error, its
    key (cut) and, unless the value was what the broker refused, its value; stamped
    with the wall clock."""
    value = b"" if why == "too_large" else production.value[:MAX_DEAD_LETTER_BYTES]
    headers = (
        ("mw-source-topic", production.topic.encode()),
        ("mw-source-id", production.id),
        ("mw-source-timestamp", str(production.timestamp).encode()),
        ("mw-error", f"refused by the broker for good: {error}".encode()[:MAX_ERROR_BYTES]),
        ("mw-reason", f"refused_{why}".encode()),
    )
    key = None if production.key is None else production.key[:1024]
    return Production(ids.derive(production.id, DLQ_INDEX), topic, key, value, now_ms, headers)


def timer_dead_letter(topic: str, entry: TimerEntry, firing_id: bytes, exc: BaseException) -> Production:
    """The dead letter of a timer firing whose callback failed."""
    headers = (
        ("mw-source-topic", b""),
        ("mw-timer-tag", entry.tag.encode()),
        ("mw-timer-timestamp", str(entry.timestamp).encode()),
        ("mw-error", _error(exc)),
    )
    return Production(
        ids.derive(firing_id, DLQ_INDEX), topic, entry.key.encode(), b"", max(entry.timestamp, 0), headers
    )


def late_copy(topic: str, inc: Incoming) -> Production:
    """A record an injector let through behind its watermark, for the late stream."""
    headers = ((LATE_HEADER, inc.late or b""), *_source(inc.topic, inc.partition, inc.offset))
    return Production(
        ids.derive(inc.id, LATE_INDEX), topic, inc.key, inc.value, max(inc.timestamp, 0), headers
    )


def error_text(production: Production) -> str:
    """The error a dead letter carries (for the log line)."""
    return dict(production.headers).get("mw-error", b"").decode(errors="replace")
