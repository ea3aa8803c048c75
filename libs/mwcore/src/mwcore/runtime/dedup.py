"""Which input records an interval has already processed (semantics section 2, step 1).

A Bloom filter in memory answers "never seen" for almost every new record; where it
says "maybe", the interval's seen-id set in the store decides. The filter holds the
ids of every committed checkpoint; past its capacity (its false-positive rate climbs,
and with it the store look-ups) it is rebuilt at twice the size from the durable set,
which seen-id garbage collection keeps to the live ids. The filter is the core's
(``runtime/parts.py``: on the native core, it and the pass over a chunk's ids are Rust's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from mwcore.runtime.bloom import Filter
from mwcore.runtime.counters import Counters

MIN_CAPACITY = 200_000


class SeenIds:
    def __init__(
        self,
        recovered: Sequence[bytes],
        lookup: Callable[[list[bytes]], list[bool]],
        all_ids: Callable[[], list[bytes]],
        counters: Counters,
        new_filter: Callable[[int], Filter],
    ) -> None:
        """``recovered``: the stored seen ids; ``lookup``: whether each id is in the
        stored set; ``all_ids``: every stored id (to rebuild the filter); ``new_filter``:
        a filter for about so many ids (the core's)."""
        self._lookup = lookup
        self._all_ids = all_ids
        self._new = new_filter
        self.bloom = self._filter(recovered)
        self._counters = counters

    def duplicates(self, rids: list[bytes], in_batch: set[bytes]) -> list[bool]:
        """Per id: already processed (committed, in ``in_batch``, or earlier in ``rids``)."""
        result, check = self.bloom.duplicates(rids, in_batch)
        if check:
            self._counters.bloom_maybe += len(check)  # ids the filter could not rule out
            confirmed = self._lookup([rids[i] for i in check])
            for i, hit in zip(check, confirmed, strict=True):
                result[i] = hit
        return result

    def committed(self, rids: Iterable[bytes]) -> None:
        """The ids of a committed checkpoint."""
        self.bloom.add_many(list(rids))
        if self.bloom.full:
            self.bloom = self._filter(self._all_ids())

    def _filter(self, ids: Sequence[bytes]) -> Filter:
        bloom = self._new(max(MIN_CAPACITY, 2 * len(ids)))
        bloom.add_many(ids)
        return bloom
