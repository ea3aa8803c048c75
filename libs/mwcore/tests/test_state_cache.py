"""The state cache keeps the keys in use: beyond its size it forgets the least recently
used, so a hot key loaded early survives a stream of cold ones."""

from __future__ import annotations

from collections.abc import Sequence

from mwcore import JsonCodec
from mwcore.runtime.state_cache import StateCache


def test_the_least_recently_used_keys_are_forgotten_not_the_first_loaded() -> None:
    loads: list[bytes] = []

    def load(keys: Sequence[bytes]) -> list[bytes | None]:
        loads.extend(keys)
        return [b"1" for _ in keys]

    cache = StateCache(JsonCodec[int](), load, max_keys=3)
    cache.get("hot")
    for n in range(10):  # a stream of cold keys, the hot one used between each
        cache.get(f"cold-{n}")
        cache.get("hot")
        cache.trim()
    assert list(cache.values) == ["cold-8", "cold-9", "hot"]
    assert loads.count(b"hot") == 1  # never evicted, so never loaded again
