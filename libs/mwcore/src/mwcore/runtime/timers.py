"""The timers of one key interval, in memory, ordered by time per domain.

The checkpoint holds the durable copy (one hash field per (key, tag):
``store.checkpoint_wire.field_of``); this queue is soft state rebuilt from it on recovery.
A timer is identified by (key, tag): setting it again replaces it. Due timers come out
in timestamp order (so in order per key).

``TimerQueue`` is the reference; the native core's twin (``runtime/timers.rs``) is the
queue its applier fires from without Python objects.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Protocol

from mwcore.api.record import TimeDomain
from mwcore.store.checkpoint import TimerEntry


class Timers(Protocol):
    """What the runtime asks of an interval's timers (``TimerQueue`` or its twin)."""

    def __len__(self) -> int: ...
    def set(self, entry: TimerEntry) -> None: ...
    def clear(self, key: str, tag: str) -> object: ...
    def clear_all(self) -> None: ...
    def oldest(self, domain: TimeDomain) -> int | None: ...
    def pop_due(self, domain: TimeDomain, limit: int) -> TimerEntry | None: ...


class TimerQueue:
    """Pending timers of one interval; heaps are pruned lazily of replaced entries."""

    def __init__(self) -> None:
        self._live: dict[tuple[str, str], TimerEntry] = {}
        self._heaps: dict[TimeDomain, list[tuple[int, str, str, bytes]]] = {
            TimeDomain.EVENT: [],
            TimeDomain.WALL: [],
            TimeDomain.HOLD: [],
        }

    def __len__(self) -> int:
        return len(self._live)

    def set(self, entry: TimerEntry) -> None:
        self._live[(entry.key, entry.tag)] = entry
        heapq.heappush(self._heaps[entry.domain], (entry.timestamp, entry.key, entry.tag, entry.set_id))

    def clear(self, key: str, tag: str) -> TimerEntry | None:
        return self._live.pop((key, tag), None)

    def clear_all(self) -> None:
        self._live.clear()
        for heap in self._heaps.values():
            heap.clear()

    def get(self, key: str, tag: str) -> TimerEntry | None:
        return self._live.get((key, tag))

    def _top(self, domain: TimeDomain) -> TimerEntry | None:
        heap = self._heaps[domain]
        while heap:
            ts, key, tag, set_id = heap[0]
            live = self._live.get((key, tag))
            if live is not None and live.timestamp == ts and live.set_id == set_id and live.domain is domain:
                return live
            heapq.heappop(heap)  # replaced (perhaps into another domain) or cleared since
        return None

    def oldest(self, domain: TimeDomain) -> int | None:
        top = self._top(domain)
        return None if top is None else top.timestamp

    def pop_due(self, domain: TimeDomain, limit: int) -> TimerEntry | None:
        """The oldest timer of ``domain`` with timestamp < ``limit``, removed; None if none."""
        top = self._top(domain)
        if top is None or top.timestamp >= limit:
            return None
        heapq.heappop(self._heaps[domain])
        del self._live[(top.key, top.tag)]
        return top

    def due(self, domain: TimeDomain, limit: int) -> Iterator[TimerEntry]:
        """Yield and remove timers with timestamp < ``limit``, oldest first.

        Each is removed as it is yielded, so timers set while firing (even due ones)
        come out of the same iteration in order.
        """
        while (top := self.pop_due(domain, limit)) is not None:
            yield top
