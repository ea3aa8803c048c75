"""An in-memory Bloom filter over 16-byte record ids, checked a batch at a time.

It is the fast path of deduplication: "no" is certain, "maybe" is confirmed
against the interval's seen-id set in Redis. Ids are mixed (splitmix64) before use,
so ids chosen by users with little entropy still spread over the bits.

This is the reference of the native core's filter (``runtime/bloom.rs``), which sets
the same bits; ``libs/mwcore/tests/test_native.py`` holds the two to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

_U64 = np.uint64
_MASK_SHIFT = np.uint64(6)


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        x = x + _U64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
        return x ^ (x >> _U64(31))


class Filter(Protocol):
    """What deduplication asks of a filter (``BloomFilter``, or the native core's)."""

    @property
    def capacity(self) -> int: ...
    @property
    def count(self) -> int: ...

    @property
    def full(self) -> bool: ...
    def add_many(self, keys: Sequence[bytes]) -> None: ...
    def duplicates(self, rids: list[bytes], in_batch: set[bytes]) -> tuple[list[bool], list[int]]: ...


class BloomFilter:
    """Fixed-size filter for about ``capacity`` ids at ``bits_per_id`` bits each."""

    def __init__(self, capacity: int = 100_000, bits_per_id: int = 12, hashes: int = 7) -> None:
        bits = max(1 << 16, capacity * bits_per_id)
        self._m = 1 << (bits - 1).bit_length()  # a power of two
        self._words = np.zeros(self._m // 64, dtype=np.uint64)
        self._k = hashes
        self._steps = np.arange(hashes, dtype=np.uint64)
        self.capacity = capacity
        self.count = 0

    @property
    def full(self) -> bool:
        return self.count > self.capacity

    @property
    def nbytes(self) -> int:
        return int(self._words.nbytes)

    def _positions(self, keys: Sequence[bytes]) -> npt.NDArray[np.uint64]:
        raw = np.frombuffer(b"".join(keys), dtype=np.uint64).reshape(-1, 2)
        h1 = _mix(raw[:, 0] ^ _mix(raw[:, 1]))
        h2 = _mix(h1) | _U64(1)
        with np.errstate(over="ignore"):
            pos = h1[:, None] + self._steps[None, :] * h2[:, None]
        result: npt.NDArray[np.uint64] = pos & _U64(self._m - 1)
        return result

    def add_many(self, keys: Sequence[bytes]) -> None:
        if not keys:
            return
        pos = self._positions(keys).ravel()
        np.bitwise_or.at(self._words, pos >> _MASK_SHIFT, _U64(1) << (pos & _U64(63)))
        self.count += len(keys)

    def contains_many(self, keys: Sequence[bytes]) -> list[bool]:
        """For each key: False if certainly never added, True if maybe added."""
        if not keys:
            return []
        pos = self._positions(keys)
        bits = (self._words[pos >> _MASK_SHIFT] >> (pos & _U64(63))) & _U64(1)
        result: list[bool] = bits.all(axis=1).tolist()
        return result

    def duplicates(self, rids: list[bytes], in_batch: set[bytes]) -> tuple[list[bool], list[int]]:
        """Per id: a duplicate for certain (in ``in_batch``, or earlier in ``rids``), and
        the indexes of those the filter cannot rule out (the store decides those)."""
        maybe = self.contains_many(rids)
        result = [False] * len(rids)
        check: list[int] = []
        seen_here: set[bytes] = set()
        for i, (rid, m) in enumerate(zip(rids, maybe, strict=True)):
            if rid in seen_here or rid in in_batch:
                result[i] = True
            elif m:
                check.append(i)
            seen_here.add(rid)
        return result, check

    def words(self) -> bytes:
        return self._words.tobytes()
