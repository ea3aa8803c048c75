"""The per-interval checkpoint: what one atomic commit writes, and what recovery reads.

A ``Checkpoint`` accumulates the effects of one batch of an interval:

1. state writes per key (encoded at commit time, once per key per batch),
2. timer sets and clears,
3. new pending productions, as batches (one hash field each: the batch's strong
   productions, and any weak ones not acknowledged in time),
4. deletions of pending batches that Kafka has acknowledged in full since the last commit,
5. the record ids newly seen (with their timestamps, for garbage collection),
6. the interval's new input positions (topic/partition -> next offset),
7. optionally, a timestamp below which seen ids are forgotten (the input watermark
   minus a slack: no record that old can be re-sent, semantics section 2),
8. backlog segments of acknowledged productions, stored until a watermark report has
   handed them over, then deleted (see ``outbox.py``).

The store applies all of it in one token-checked script, or none of it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from mwcore.api.record import Production, TimeDomain
from mwcore.errors import CorruptStateError
from mwcore.watermarks.report_format import Segment

_H = struct.Struct(">H")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_LEN = struct.Struct(">I")


@dataclass
class Checkpoint:
    state: dict[bytes, bytes | None] = field(default_factory=dict)
    timers: dict[bytes, bytes | None] = field(default_factory=dict)
    productions: list[Production] = field(default_factory=list)  # strong, this batch
    pending: dict[bytes, list[Production]] = field(default_factory=dict)  # set by prepare
    acked: list[bytes] = field(default_factory=list)  # batch keys
    seen: dict[bytes, int] = field(default_factory=dict)
    positions: dict[str, int] = field(default_factory=dict)
    records: int = 0  # records and timer firings it covers (for metrics)
    commit_id: bytes = b""  # unique per checkpoint (makes a retried commit a no-op)
    seen_gc_below: int | None = None  # not part of is_empty: rides along with real commits
    segments: dict[bytes, bytes | None] = field(default_factory=dict)  # key -> encoded, None: delete

    def is_empty(self) -> bool:
        return not (
            self.state
            or self.timers
            or self.productions
            or self.pending
            or self.acked
            or self.seen
            or self.positions
            or self.segments
        )


@dataclass
class Snapshot:
    """An interval as recovery finds it in the store."""

    token: str
    positions: dict[str, int]
    timers: list[TimerEntry]
    pending: dict[bytes, list[Production]]
    seen: list[bytes]
    commits: int
    segments: dict[bytes, list[Segment]] = field(default_factory=dict)


def position_field(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


_TOPIC_PREFIX: dict[str, bytes] = {}  # topic -> its length-prefixed bytes (few topics)
_TS_HEADERS = struct.Struct(">qH")


def _topic_prefix(topic: str) -> bytes:
    prefix = _TOPIC_PREFIX.get(topic)
    if prefix is None:
        raw = topic.encode()
        prefix = _TOPIC_PREFIX[topic] = _H.pack(len(raw)) + raw
    return prefix


def encode_production(p: Production) -> bytes:
    """Binary framing of a pending production (the Redis hash value; the id is the field)."""
    key = p.key
    parts = [_topic_prefix(p.topic), _I.pack(-1) if key is None else _I.pack(len(key)) + key]
    parts.append(_TS_HEADERS.pack(p.timestamp, len(p.headers)))
    for name, value in p.headers:
        raw = name.encode()
        parts += [_H.pack(len(raw)), raw, _I.pack(len(value)), value]
    parts.append(p.value)
    return b"".join(parts)


def decode_production(pid: bytes, data: bytes) -> Production:
    pos = 0
    (n,) = _H.unpack_from(data, pos)
    pos += 2
    topic = data[pos : pos + n].decode()
    pos += n
    (klen,) = _I.unpack_from(data, pos)
    pos += 4
    key = None
    if klen >= 0:
        key = data[pos : pos + klen]
        pos += klen
    (ts,) = _Q.unpack_from(data, pos)
    pos += 8
    (nh,) = _H.unpack_from(data, pos)
    pos += 2
    headers = []
    for _ in range(nh):
        (hn,) = _H.unpack_from(data, pos)
        pos += 2
        name = data[pos : pos + hn].decode()
        pos += hn
        (vl,) = _I.unpack_from(data, pos)
        pos += 4
        headers.append((name, data[pos : pos + vl]))
        pos += vl
    return Production(pid, topic, key, data[pos:], ts, tuple(headers))


def encode_batch(productions: list[Production]) -> bytes:
    """All productions of one pending batch, in one blob (the hash field's value)."""
    parts: list[bytes] = []
    for p in productions:
        body = encode_production(p)
        parts += (_LEN.pack(len(body)), p.id, body)
    return b"".join(parts)


def decode_batch(blob: bytes) -> list[Production]:
    """A pending batch as ``encode_batch`` wrote it; ``CorruptStateError`` if it is not one."""
    out = []
    pos = 0
    try:
        while pos < len(blob):
            (n,) = _LEN.unpack_from(blob, pos)
            pid = blob[pos + 4 : pos + 20]
            out.append(decode_production(pid, blob[pos + 20 : pos + 20 + n]))
            pos += 20 + n
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptStateError(f"a pending batch cannot be read at byte {pos}: {exc}") from None
    return out


# -- timers: one hash field per (key, tag) -------------------------------------------------

_ENTRY = struct.Struct(">cq")
_DOMAIN_CODE = {TimeDomain.EVENT: b"e", TimeDomain.WALL: b"w", TimeDomain.HOLD: b"h"}
_CODE_DOMAIN = {v: k for k, v in _DOMAIN_CODE.items()}


@dataclass(frozen=True, slots=True)
class TimerEntry:
    key: str
    tag: str
    timestamp: int
    domain: TimeDomain
    set_id: bytes  # id of the operation that set it; firing ids derive from it


_KLEN = struct.Struct(">H")


def field_of(key: str, tag: str) -> bytes:
    """Hash field of a timer: the key length-prefixed (keys may hold any byte), then the tag."""
    raw = key.encode()
    return _KLEN.pack(len(raw)) + raw + tag.encode()


def encode_entry(entry: TimerEntry) -> bytes:
    return _ENTRY.pack(_DOMAIN_CODE[entry.domain], entry.timestamp) + entry.set_id


def decode_entry(field: bytes, value: bytes) -> TimerEntry:
    """A timer as ``field_of`` and ``encode_entry`` wrote it; ``CorruptStateError`` if not."""
    try:
        (n,) = _KLEN.unpack_from(field)
        key, tag = field[2 : 2 + n], field[2 + n :]
        code, ts = _ENTRY.unpack_from(value)
        return TimerEntry(key.decode(), tag.decode(), ts, _CODE_DOMAIN[code], value[_ENTRY.size :])
    except (struct.error, UnicodeDecodeError, KeyError) as exc:
        raise CorruptStateError(f"a timer cannot be read: {exc!r}") from None
