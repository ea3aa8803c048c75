"""Production ids must never change between versions: a re-run after an upgrade must
re-emit the ids the old version emitted, or downstream dedup would let copies through."""

from __future__ import annotations

import hashlib

from mwcore.api import ids


def test_derive_is_blake2b_of_the_cause_and_the_big_endian_index() -> None:
    cause = bytes(range(16))
    for index in (0, 1, 255, 256, 70_000, 0x8000_0000, 0xFFFF_FFFF):
        expected = hashlib.blake2b(cause + index.to_bytes(4, "big"), digest_size=16).digest()
        assert ids.derive(cause, index) == expected
    assert ids.derive(cause, 0).hex() == hashlib.blake2b(cause + b"\0\0\0\0", digest_size=16).hexdigest()
