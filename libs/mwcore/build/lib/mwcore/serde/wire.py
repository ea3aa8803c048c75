"""Avro's binary encoding, the few primitives the generated codecs (``codegen.py``) call:
zig-zag varints, length-prefixed bytes, booleans, IEEE floats."""

from __future__ import annotations

import struct
from typing import Any

from mwcore.limits import MAX_AVRO_ITEMS

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


class Truncated(ValueError):
    """The data ends inside a value."""


def _varint_tail(b: bytes, p: int, first: int) -> tuple[int, int]:
    """The rest of a varint whose first byte (``first``, >= 0x80) was at ``p - 1``."""
    result = first & 0x7F
    shift = 7
    while True:
        c = b[p]
        p += 1
        result |= (c & 0x7F) << shift
        if c < 0x80:
            return result, p
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _write_long(out: bytearray, v: int) -> None:
    if not LONG_MIN <= v <= LONG_MAX:
        raise ValueError(f"{v} does not fit an Avro long")
    z = (v << 1) ^ (v >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _write_int(out: bytearray, v: int) -> None:
    if not INT_MIN <= v <= INT_MAX:
        raise ValueError(f"{v} does not fit an Avro int")
    _write_long(out, v)


def _write_bytes(out: bytearray, v: bytes) -> None:
    if not isinstance(v, (bytes, bytearray)):
        raise TypeError(f"expected bytes, got {type(v).__name__}")
    _write_long(out, len(v))
    out += v


def _write_boolean(out: bytearray, v: bool) -> None:
    out.append(1 if v else 0)


HELPERS: dict[str, Any] = {  # by the names the generated code uses
    "_MAX_ITEMS": MAX_AVRO_ITEMS,
    "_varint_tail": _varint_tail,
    "_write_long": _write_long,
    "_write_int": _write_int,
    "_write_bytes": _write_bytes,
    "_write_boolean": _write_boolean,
    "_pack_f": struct.Struct("<f").pack,
    "_pack_d": struct.Struct("<d").pack,
    "_unpack_f": struct.Struct("<f").unpack_from,
    "_unpack_d": struct.Struct("<d").unpack_from,
    "Truncated": Truncated,
}
