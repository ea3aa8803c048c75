"""The state cache keeps the keys in use: beyond its size it forgets the least recently
used, so a hot key loaded early survives a stream of cold ones."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from mwcore import JsonCodec
from mwcore.controls import SAFE, NegativeControls
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


class Store:
    """The store's state of one interval, and the keys read from it."""

    def __init__(self, state: dict[bytes, bytes]) -> None:
        self.state = state
        self.reads: list[bytes] = []

    def load(self, keys: Sequence[bytes]) -> list[bytes | None]:
        self.reads.extend(keys)
        return [self.state.get(k) for k in keys]


def known_cache(store: Store, max_keys: int = 100, controls: NegativeControls = SAFE) -> StateCache:
    cache = StateCache(JsonCodec[int](), store.load, max_keys=max_keys, controls=controls)
    cache.know(dict(store.state))
    return cache


def test_with_the_whole_state_read_a_key_not_cached_needs_no_read() -> None:
    store = Store({b"a": b"1", b"b": b"2"})
    cache = known_cache(store)
    cache.preload(["a", "new"])
    assert cache.get("b") == 2 and cache.values == {"a": 1, "new": None, "b": 2}
    assert store.reads == [] and cache.knows_all


def test_a_key_asked_twice_in_one_preload_keeps_its_state() -> None:
    """(The read hands each key's bytes over once.)"""
    store = Store({b"a": b"3"})
    cache = known_cache(store)
    cache.preload(["a", "b", "a"])
    assert cache.values == {"a": 3, "b": None}


def test_a_key_the_cache_forgot_is_read_from_the_store_again() -> None:
    """Trim: the store now holds what the batches committed, not what was read at first
    (every key not cached is read from the store from then on)."""
    store = Store({b"a": b"1"})
    cache = known_cache(store, max_keys=1)
    cache.values["a"] = cache.get("a") + 1
    store.state[b"a"] = b"2"  # committed
    cache.get("b")
    cache.trim()  # forgets a
    assert not cache.knows_all
    assert cache.get("a") == 2 and store.reads == [b"a"]


def test_a_key_dropped_to_undo_a_failed_call_is_read_from_the_store_again() -> None:
    store = Store({b"a": b"1"})
    cache = known_cache(store)
    cache.values["a"] = cache.get("a") + 4
    store.state[b"a"] = b"5"  # committed
    cache.restore("a", {})  # a failed call: nothing of a's in the open batch
    assert cache.get("a") == 5 and store.reads == [b"a"]
    cache.restore("a", {})
    cache.preload(["a", "b"])  # only a is read
    assert store.reads == [b"a", b"a"] and cache.values["b"] is None and cache.knows_all


@pytest.mark.negative_control
def test_negative_control_a_forgotten_key_served_from_the_first_read_is_stale() -> None:
    """MW_UNSAFE_TRUST_FORGOTTEN_STATE: the check above, with the read at acquisition
    still trusted after the cache forgot a key, finds the key's state gone."""
    store = Store({b"a": b"1"})
    cache = known_cache(store, max_keys=1, controls=NegativeControls(trust_forgotten_state=True))
    cache.values["a"] = cache.get("a") + 1
    store.state[b"a"] = b"2"
    cache.get("b")
    cache.trim()
    assert cache.get("a") is None  # not 2: the count would start over
