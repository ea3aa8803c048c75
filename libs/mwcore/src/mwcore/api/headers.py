"""User headers: what a record carries beside its key and value (tracing ids, tenants,
content types), read on ``Record.headers`` and set with ``ctx.produce(..., headers=...)``.

The kit's own headers are reserved: a name starting with ``mw-`` (any case: the record
id, its MAC, the late mark, a dead letter's reason) and confluent-kafka's
``__value_schema_id`` (the value's writer schema, read by the decoder). User code cannot
set them (``ReservedHeader``), and a record's ``headers`` never shows them.

Bounds (semantics I-12), on the user headers of one record, in and out: at most
``MAX_HEADERS`` of them, of at most ``MAX_HEADER_BYTES`` in all (names and values).
An input record over either is a dead letter ``headers_too_large``; a production over
either is refused (the call raises, so the record is a dead letter ``user_code``).
Together with the bounds on keys and values, a production stays under Kafka's default
``message.max.bytes`` (1 MiB).

A header's value is bytes, or None (Kafka allows a header without a value) on input;
on output it is bytes or str (written as UTF-8). Pending productions keep their headers
in the checkpoint, so a re-send after a crash carries them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mwcore.errors import InvalidRecord
from mwcore.limits import MAX_HEADER_BYTES, MAX_HEADERS
from mwcore.serde.framing import SCHEMA_ID_HEADER

RESERVED_PREFIX = "mw-"

# What a record's ``headers`` holds: (name, value) pairs in the order Kafka carries them
# (one name may come more than once).
Headers = tuple[tuple[str, bytes | None], ...]
# What ``ctx.produce`` takes: a mapping or (name, value) pairs, values bytes or str.
HeadersIn = Mapping[str, bytes | str] | Iterable[tuple[str, bytes | str]]


class ReservedHeader(ValueError):
    """User code set one of the kit's own headers."""


def is_reserved(name: str) -> bool:
    """Whether ``name`` is one of the kit's headers (never a user header)."""
    return name[:3].lower() == RESERVED_PREFIX or name == SCHEMA_ID_HEADER


def over_bounds(count: int, size: int) -> InvalidRecord:
    """The error of a record whose user headers are over the bounds."""
    return InvalidRecord(
        "headers_too_large",
        f"{count} headers of {size} bytes (at most {MAX_HEADERS} headers of {MAX_HEADER_BYTES} bytes)",
    )


def to_send(given: HeadersIn, *, bounded: bool = True) -> tuple[tuple[str, bytes], ...]:
    """``ctx.produce``'s ``headers`` as a production keeps them; raises ``ReservedHeader``
    for one of the kit's names, ``TypeError`` for a name or value of another type, and
    ``ValueError`` beyond the bounds (unless not ``bounded``: an input record's, which
    the engine screens as a worker does)."""
    pairs = given.items() if isinstance(given, Mapping) else given
    out: list[tuple[str, bytes]] = []
    size = 0
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"headers: expected (name, value) pairs or a mapping, got {pair!r:.80}")
        name, value = pair
        if not isinstance(name, str):
            raise TypeError(f"header name {name!r:.80} is not a str")
        if is_reserved(name):
            raise ReservedHeader(
                f"header {name!r:.80} is the kit's own (mw-* and {SCHEMA_ID_HEADER} are reserved)"
            )
        if isinstance(value, str):
            value = value.encode()
        elif not isinstance(value, bytes):
            raise TypeError(f"header {name!r:.80}: value must be bytes or str, got {type(value).__name__}")
        size += len(name.encode()) + len(value)
        out.append((name, value))
        if bounded and (len(out) > MAX_HEADERS or size > MAX_HEADER_BYTES):
            raise ValueError(f"headers: more than {MAX_HEADERS} or over {MAX_HEADER_BYTES} bytes")
    return tuple(out)
