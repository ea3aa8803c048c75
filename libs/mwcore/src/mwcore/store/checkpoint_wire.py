"""The checkpoint's wire format: how each part of a ``Checkpoint`` is written in Redis,
as the commit script (``scripts.py``) and recovery read it, and the commit script's
arguments. The native core's ``store/checkpoint.rs`` writes the same bytes
(``libs/mwcore/tests/test_native.py`` holds the two to it).

- a pending batch (one hash field per batch): each production's body length (u32), its
  id, then its body (``encode_production``: topic, key, timestamp, headers, value);
- a timer (one hash field per (key, tag)): the field is the key length-prefixed, then
  the tag (``field_of``); the value its domain's code, timestamp and set id
  (``encode_entry``);
- an input position: the field ``topic:partition``, the next offset;
- the commit script's call (``commit_args``, packed by ``fast_script.pack_call``; the
  native core packs the whole call in Rust): the token, whether it is checked, the
  commit id, then each section of the checkpoint as ``scripts.COMMIT`` reads them.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Protocol

from mwcore.api.record import Production, TimeDomain
from mwcore.errors import CorruptStateError
from mwcore.store.checkpoint import Checkpoint, TimerEntry
from mwcore.store.fast_script import Arg, Packed

_H = struct.Struct(">H")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_LEN = struct.Struct(">I")


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


# -- timers ---------------------------------------------------------------------------------

_ENTRY = struct.Struct(">cq")
_DOMAIN_CODE = {TimeDomain.EVENT: b"e", TimeDomain.WALL: b"w", TimeDomain.HOLD: b"h"}
DOMAIN_CODES = tuple(_DOMAIN_CODE[d][0] for d in (TimeDomain.EVENT, TimeDomain.WALL, TimeDomain.HOLD))
_CODE_DOMAIN = {v: k for k, v in _DOMAIN_CODE.items()}


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


# -- the commit script's call -----------------------------------------------------------------


class CommitPacker(Protocol):
    """Makes the commit script's call of one checkpoint: its arguments (``commit_args``,
    packed by the store), or the call packed whole (the native core's)."""

    def __call__(
        self, sha: str, keys: Sequence[str], token: str, fencing: bool, cp: Checkpoint
    ) -> list[Arg] | Packed: ...


def reference_packer(sha: str, keys: Sequence[str], token: str, fencing: bool, cp: Checkpoint) -> list[Arg]:
    """``commit_args``: the reference's packing (``fast_script.pack_call`` packs them)."""
    return commit_args(token, fencing, cp)


def commit_args(token: str, fencing: bool, cp: Checkpoint) -> list[Arg]:
    """The commit script's arguments (``scripts.COMMIT``'s ARGV, after its keys)."""
    commit_id = cp.commit_id or os.urandom(16)
    args: list[Arg] = [token, "1" if fencing else "0", commit_id]
    _sets_and_deletes(args, cp.state)
    _sets_and_deletes(args, cp.timers)
    args.append(len(cp.pending))
    for key, productions in cp.pending.items():
        args += (key, encode_batch(productions))
    args.append(len(cp.acked))
    args += cp.acked
    args.append(len(cp.seen))
    for rid, ts in cp.seen.items():
        args += (ts, rid)
    args.append(len(cp.positions))
    for pos_field, off in cp.positions.items():
        args += (pos_field, off)
    if cp.seen_gc_below is None:
        args.append(0)
    else:
        args += (1, cp.seen_gc_below)
    _sets_and_deletes(args, cp.segments)
    return args


def _sets_and_deletes(args: list[Arg], writes: dict[bytes, bytes | None]) -> None:
    """Append a "set" section (count, then field/value pairs) and a "delete" section."""
    deletes = [f for f, v in writes.items() if v is None]
    args.append(len(writes) - len(deletes))
    for f, v in writes.items():
        if v is not None:
            args += (f, v)
    args.append(len(deletes))
    args += deletes
