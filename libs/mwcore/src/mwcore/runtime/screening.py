"""The record path's second step for a chunk of consumed messages (semantics section 2,
steps 1 and 2): which messages become records, and the records themselves, before user
code sees any of them.

Given each message's id, late mark and verdict (``envelope.py``) and which ids are
duplicates (``dedup.py``), ``screen`` passes over the chunk once, in order:

- a duplicate is dropped (counted);
- every other id joins the batch's seen ids;
- a message whose id did not verify (``bad_id``), whose timestamp is out of the kit's
  bounds (``bad_timestamp``, ``limits.py``) or that an injector let through late
  (``late``) is set aside, its index and why in ``early``, for the caller to
  dead-letter or route in that order;
- every other message is an item: its ``Record`` (the key decoded as UTF-8, the value
  by its topic's decoder), or, when it has no usable key or its value does not decode,
  ``(index, error)`` for the caller to dead-letter; so is a message whose user headers
  are over their bounds (``headers_too_large``, ``api/headers.py``); the keys of the
  items are collected to load their state in one read.

``screen`` is the reference (``ReferenceScreener``); the native core's screener
(``mwcore.cores.native``) does the same work in Rust on the native consumer's messages
(``libs/mwcore/tests/test_native_screening.py`` holds the two to identical output). There
is one per process: it keeps the short strings that recur in the input (keys, and strings
in values) as one ``str`` each, for every interval of the worker (``serde/strings.rs``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from mwcore.api import headers as user_headers
from mwcore.api.headers import Headers
from mwcore.api.record import Record
from mwcore.errors import InvalidRecord, SerializationError
from mwcore.limits import MAX_HEADER_BYTES, MAX_HEADERS, MAX_KEY_BYTES, MAX_TIMESTAMP, MIN_TIMESTAMP
from mwcore.serde.framing import with_schema_id_header
from mwcore.transport.message import Message

BAD_ID = "bad_id"
BAD_TIMESTAMP = "bad_timestamp"
LATE = "late"

Bindings = dict[str, tuple[str, Callable[[bytes], Any]]]  # topic -> (stream, decode)
Item = Record | tuple[int, SerializationError]
# (duplicates, early, items, keys)
Screened = tuple[int, list[tuple[int, str]], list[Item], set[str]]


class Screener(Protocol):
    """Screens a chunk (``screen``'s arguments and result): ``ReferenceScreener``, or the
    native core's (which screens only the native consumer's messages)."""

    def screen(
        self,
        messages: Sequence[Message],
        rids: list[bytes],
        dup: list[bool] | None,
        forged: set[int],
        lates: dict[int, bytes],
        schema_ids: dict[int, bytes],
        headers: dict[int, Headers],
        batch_seen: set[bytes],
        bindings: Bindings,
    ) -> Screened: ...


_tuple_new = tuple.__new__  # builds a NamedTuple without its Python-level __new__


def screen(
    messages: Sequence[Message],
    rids: list[bytes],
    dup: list[bool] | None,
    forged: set[int],
    lates: dict[int, bytes],
    schema_ids: dict[int, bytes],
    headers: dict[int, Headers],
    batch_seen: set[bytes],
    bindings: Bindings,
) -> Screened:
    duplicates = 0
    early: list[tuple[int, str]] = []
    items: list[Item] = []
    keys: set[str] = set()
    new_record = _tuple_new
    last_topic: str | None = None
    stream = ""
    decode: Callable[[bytes], Any] | None = None
    for i, m in enumerate(messages):
        rid = rids[i]
        if dup is not None and dup[i]:
            duplicates += 1
            continue
        batch_seen.add(rid)
        if i in forged:
            early.append((i, BAD_ID))
            continue
        ts = m.timestamp()[1]
        if not MIN_TIMESTAMP <= ts <= MAX_TIMESTAMP:
            early.append((i, BAD_TIMESTAMP))
            continue
        if i in lates:
            early.append((i, LATE))
            continue
        raw_key = m.key()
        try:
            key = None if raw_key is None or len(raw_key) > MAX_KEY_BYTES else raw_key.decode()
        except UnicodeDecodeError:
            key = None
        if key is None:
            items.append((i, key_error(raw_key)))
            continue
        keys.add(key)
        own: Headers = ()
        if headers and i in headers:
            own = headers[i]
            size = sum(len(name.encode()) + len(value or b"") for name, value in own)
            if len(own) > MAX_HEADERS or size > MAX_HEADER_BYTES:
                items.append((i, user_headers.over_bounds(len(own), size)))
                continue
        topic = m.topic()
        if topic is not last_topic:
            last_topic = topic
            stream, decode = bindings[topic or ""]
        try:
            data = m.value() or b""
            if schema_ids and i in schema_ids:  # the writer schema named by a header
                data = with_schema_id_header(schema_ids[i], data)
            value = decode(data)  # type: ignore[misc]
        except SerializationError as exc:
            items.append((i, exc))
            continue
        fields = (key, value, ts, rid, stream, m.partition() or 0, m.offset() or 0, own)
        items.append(new_record(Record, fields))
    return duplicates, early, items, keys


def key_error(raw: bytes | None) -> SerializationError:
    """Why a message's key is no record's key."""
    if raw is None:
        return SerializationError("record has no key")
    if len(raw) > MAX_KEY_BYTES:
        return InvalidRecord("key_too_long", f"{len(raw)} bytes, more than {MAX_KEY_BYTES}")
    return SerializationError("key is not UTF-8")


def out_of_bounds(key: str, timestamp: int, headers: Headers = ()) -> SerializationError | None:
    """Why a record (key, timestamp, user headers) is outside the kit's bounds, as
    ``screen`` finds it for a worker, or None: for the engines that take records
    without a message (``in_memory.py``: the harness, ``mw batch``'s ``KeyRunner``)."""
    if not MIN_TIMESTAMP <= timestamp <= MAX_TIMESTAMP:
        return InvalidRecord("bad_timestamp", f"{timestamp} is outside {MIN_TIMESTAMP} to {MAX_TIMESTAMP}")
    raw = key.encode(errors="surrogatepass")
    if len(raw) > MAX_KEY_BYTES:
        return key_error(raw)
    if headers:
        size = sum(len(name.encode()) + len(value or b"") for name, value in headers)
        if len(headers) > MAX_HEADERS or size > MAX_HEADER_BYTES:
            return user_headers.over_bounds(len(headers), size)
    return None


class ReferenceScreener:
    """``screen``."""

    screen = staticmethod(screen)
