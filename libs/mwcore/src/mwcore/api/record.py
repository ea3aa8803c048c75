"""Value types handed to and produced by computations."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple


class TimeDomain(enum.Enum):
    """Which clock a timer follows."""

    EVENT = "event"  # fires once the computation's input low watermark passes it
    WALL = "wall"  # fires once the wall clock reaches it
    # Never fires: a watermark hold. While set, it holds the computation's output
    # watermark at its timestamp (for state that will be produced later without a
    # timer, e.g. records buffered for a join). Clear it like a timer.
    HOLD = "hold"


class Record(NamedTuple):
    """One input record as user code sees it (immutable).

    ``value`` is the decoded Avro datum (a dict for records). ``id`` is the unique
    16-byte record id that exactly-once delivery deduplicates on. ``headers`` are its
    user headers, ``(name, value)`` pairs as Kafka carries them, the kit's own left out
    (``api/headers.py``).
    """

    key: str
    value: Any
    timestamp: int
    id: bytes
    stream: str
    partition: int
    offset: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class Timer:
    """A timer firing as user code sees it."""

    key: str
    tag: str
    timestamp: int
    domain: TimeDomain


class Production(NamedTuple):
    """An encoded output record, ready for Kafka, kept pending in the checkpoint."""

    id: bytes
    topic: str
    key: bytes | None
    value: bytes
    timestamp: int
    headers: tuple[tuple[str, bytes], ...] = ()


ID_HEADER = "mw-id"
# Set by an injector on a record behind the low watermark it already reported (value:
# how many ms behind). Such records are not accounted in the backlog, so they cannot
# hold watermarks; consumers apply their late-data policy to them.
LATE_HEADER = "mw-late-ms"
