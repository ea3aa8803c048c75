"""Deterministic record ids (semantics I-3).

A production's id is derived from what caused it, so that a re-execution after a
crash re-emits the same ids and the consumer drops them.
"""

from __future__ import annotations

import hashlib
import os

ID_BYTES = 16


_INDEX = [i.to_bytes(4, "big") for i in range(256)]
_blake2b = hashlib.blake2b


def derive(cause: bytes, index: int) -> bytes:
    """Id of the ``index``-th effect caused by ``cause`` (a record id or a timer firing id)."""
    suffix = _INDEX[index] if 0 <= index < 256 else index.to_bytes(4, "big")
    return _blake2b(cause + suffix, digest_size=ID_BYTES).digest()


def timer_firing_id(set_id: bytes, tag: str, timestamp: int) -> bytes:
    """Identity of one firing: the id of the operation that set the timer, its tag and time."""
    payload = set_id + tag.encode() + b"\x00" + timestamp.to_bytes(8, "big", signed=True)
    return hashlib.blake2b(payload, digest_size=ID_BYTES, person=b"mw-timer").digest()


def from_position(topic: str, partition: int, offset: int) -> bytes:
    """Id for a record that arrived without one (written by a foreign producer)."""
    payload = f"{topic}\x00{partition}\x00{offset}".encode()
    return hashlib.blake2b(payload, digest_size=ID_BYTES, person=b"mw-offset").digest()


def random_id() -> bytes:
    return os.urandom(ID_BYTES)
