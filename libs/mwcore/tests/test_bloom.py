from __future__ import annotations

import os

from mwcore.runtime.bloom import BloomFilter


def test_no_false_negatives_and_few_false_positives() -> None:
    bloom = BloomFilter(capacity=50_000)
    added = [os.urandom(16) for _ in range(50_000)]
    bloom.add_many(added)
    assert all(bloom.contains_many(added))
    others = [os.urandom(16) for _ in range(50_000)]
    rate = sum(bloom.contains_many(others)) / len(others)
    assert rate < 0.01


def test_low_entropy_ids_still_spread() -> None:
    bloom = BloomFilter(capacity=20_000)
    bloom.add_many([i.to_bytes(16, "big") for i in range(20_000)])
    probes = [(i + 1_000_000).to_bytes(16, "big") for i in range(20_000)]
    assert sum(bloom.contains_many(probes)) / len(probes) < 0.01


def test_empty_inputs() -> None:
    bloom = BloomFilter()
    bloom.add_many([])
    assert bloom.contains_many([]) == []
    assert bloom.contains_many([b"x" * 16]) == [False]
