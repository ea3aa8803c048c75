"""The timers of one key interval, in memory, ordered by time per domain.

The checkpoint holds the durable copy (one hash field per (key, tag)); this queue is
soft state rebuilt from it on recovery. A timer is identified by (key, tag): setting
it again replaces it. Due timers come out in timestamp order (so in order per key).
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from mwcore.api.record import TimeDomain

_ENTRY = struct.Struct(">cq")
_DOMAIN_CODE = {TimeDomain.EVENT: b"e", TimeDomain.WALL: b"w", TimeDomain.HOLD: b"h"}
_CODE_DOMAIN = {v: k for k, v in _DOMAIN_CODE.items()}


@dataclass(frozen=True, slots=True)
class TimerEntry:
    key: str
    tag: str
    timestamp: int
    domain: TimeDomain
    set_id: bytes  # id of the operation that set it; firing ids derive from it


_KLEN = struct.Struct(">H")


def field_of(key: str, tag: str) -> bytes:
    """Hash field of a timer: the key length-prefixed (keys may hold any byte), then the tag."""
    raw = key.encode()
    return _KLEN.pack(len(raw)) + raw + tag.encode()


def encode_entry(entry: TimerEntry) -> bytes:
    return _ENTRY.pack(_DOMAIN_CODE[entry.domain], entry.timestamp) + entry.set_id


def decode_entry(field: bytes, value: bytes) -> TimerEntry:
    (n,) = _KLEN.unpack_from(field)
    key, tag = field[2 : 2 + n], field[2 + n :]
    code, ts = _ENTRY.unpack_from(value)
    return TimerEntry(key.decode(), tag.decode(), ts, _CODE_DOMAIN[code], value[_ENTRY.size :])


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

    def get(self, key: str, tag: str) -> TimerEntry | None:
        return self._live.get((key, tag))

    def _top(self, domain: TimeDomain) -> TimerEntry | None:
        heap = self._heaps[domain]
        while heap:
            ts, key, tag, set_id = heap[0]
            live = self._live.get((key, tag))
            if live is not None and live.timestamp == ts and live.set_id == set_id:
                return live
            heapq.heappop(heap)  # replaced or cleared since it was pushed
        return None

    def oldest(self, domain: TimeDomain) -> int | None:
        top = self._top(domain)
        return None if top is None else top.timestamp

    def due(self, domain: TimeDomain, limit: int) -> Iterator[TimerEntry]:
        """Yield and remove timers with timestamp < ``limit``, oldest first.

        Each is removed as it is yielded, so timers set while firing (even due ones)
        come out of the same iteration in order.
        """
        while True:
            top = self._top(domain)
            if top is None or top.timestamp >= limit:
                return
            heapq.heappop(self._heaps[domain])
            del self._live[(top.key, top.tag)]
            yield top
