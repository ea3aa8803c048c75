"""What the runtime produces for input it cannot process: dead letters, and copies of
late records for a computation's late stream.

A dead letter keeps the input as it came (or re-encoded, for a record that decoded but
failed in user code), its source (topic, partition, offset, record id) and the error,
in headers. Its id derives from the input's, so a re-run after a crash produces the
same dead letter and consumers drop the copy.
"""

from __future__ import annotations

from typing import NamedTuple

from mwcore.api import ids
from mwcore.api.record import LATE_HEADER, Production
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


def _error(exc: BaseException) -> bytes:
    return f"{type(exc).__name__}: {exc}".encode()[:MAX_ERROR_BYTES]


def _source(topic: str, partition: int, offset: int) -> Headers:
    return (
        ("mw-source-topic", topic.encode()),
        ("mw-source-partition", str(partition).encode()),
        ("mw-source-offset", str(offset).encode()),
    )


def dead_letter(topic: str, inc: Incoming, exc: BaseException) -> Production:
    """The dead letter of an input record, as it came (or re-encoded, if it decoded)."""
    headers = (
        *_source(inc.topic, inc.partition, inc.offset),
        ("mw-error", _error(exc)),
        ("mw-source-id", inc.id),
    )
    return Production(
        ids.derive(inc.id, DLQ_INDEX), topic, inc.key, inc.value, max(inc.timestamp, 0), headers
    )


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
