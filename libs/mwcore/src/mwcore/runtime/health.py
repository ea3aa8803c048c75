"""Whether a worker is doing its job: the reason ``/healthz`` gives when it is not.

A turning loop is not enough (the loop check of ``metrics.Liveness`` covers a hung
loop). A worker can turn its loop and still do nothing useful:

- **assigned, no progress**: it holds a partition whose input waits (the partition's
  end, as last fetched, is past the interval's committed position), yet the interval
  has not committed for ``stall_s`` (a partition left paused, an interval fenced and
  never taken back);
- **never assigned**: it has held no partition for ``stall_s`` while its group's
  input waits and the group's committed positions do not move: nobody is processing
  it (a group that cannot finish a rebalance). A spare worker whose group is
  progressing under other members is healthy.

The worker calls ``check`` from its loop (at most once a second; the two Kafka queries
of the unassigned case only while it is unassigned); the HTTP thread reads ``reason``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol

from mwcore.transport.consumer import Offset, Part

Offsets = dict[tuple[str, int], int]


class Health:
    def __init__(self, stall_s: float, every_s: float = 1.0) -> None:
        self.stall_s = stall_s
        self.every_s = every_s
        self.reason: str | None = None
        self._next = 0.0
        self._progress: dict[int, float] = {}  # interval index -> last commit (or acquire)
        self._unassigned_since: float | None = None
        self._group_seen: tuple[Offsets, float] | None = None  # committed positions, since when unchanged

    def problem(self) -> str | None:
        """The reason this worker is not doing its job (``/healthz``), or None."""
        return self.reason

    def progressed(self, index: int, now: float | None = None) -> None:
        self._progress[index] = time.monotonic() if now is None else now

    def forget(self, index: int) -> None:
        self._progress.pop(index, None)

    def due(self, now: float) -> bool:
        if now < self._next:
            return False
        self._next = now + self.every_s
        return True

    def check(
        self,
        now: float,
        consumer: MemberView,
        committed_position: Callable[[Part], int | None],
        topics: Iterable[str],
        partitions: int,
    ) -> None:
        """Is this worker doing its job? ``committed_position``: where its interval's
        checkpoint has a partition (None: not owned, or not read yet)."""
        assigned = consumer.assignment()
        if not assigned:
            self.check_unassigned(now, lambda: group_state(consumer, topics, partitions))
            return
        waiting: dict[int, int] = {}
        for part in assigned:
            high = consumer.end_offset(part, cached=True)
            pos = committed_position(part)
            if pos is None:
                pos = consumer.position(part)
            behind = max(0, high - max(0, pos)) if high >= 0 else 0
            waiting[part.partition] = waiting.get(part.partition, 0) + behind
        self.check_assigned(now, waiting.items())

    def check_assigned(self, now: float, waiting: Iterable[tuple[int, int]]) -> None:
        """``waiting``: (interval index, records waiting) of every assigned partition."""
        self._unassigned_since = None
        self._group_seen = None
        worst: tuple[float, int, int] | None = None
        for index, behind in waiting:
            since = self._progress.setdefault(index, now)
            idle = now - since
            if behind > 0 and idle >= self.stall_s and (worst is None or idle > worst[0]):
                worst = (idle, index, behind)
        if worst is None:
            self.reason = None
        else:
            idle, index, behind = worst
            self.reason = (
                f"interval {index} has not committed for {idle:.0f} s "
                f"while {behind} records wait in its input"
            )

    def check_unassigned(self, now: float, group_state: Callable[[], tuple[Offsets, Offsets]]) -> None:
        """No partition assigned. ``group_state``: (the group's committed positions,
        the partitions' ends), queried only once the worker has waited ``stall_s``."""
        if self._unassigned_since is None:
            self._unassigned_since = now
        waited = now - self._unassigned_since
        if waited < self.stall_s:
            self.reason = None
            return
        committed, ends = group_state()
        behind = sum(max(0, end - committed.get(tp, 0)) for tp, end in ends.items())
        if self._group_seen is None or self._group_seen[0] != committed:
            self._group_seen = (committed, now)
        still = now - self._group_seen[1]
        if behind > 0 and still >= self.stall_s:
            self.reason = (
                f"no interval assigned for {waited:.0f} s while {behind} records wait in the group's "
                f"input and its committed positions have not moved for {still:.0f} s"
            )
        else:
            self.reason = None


class GroupView(Protocol):
    """What the unassigned check reads of the group (``transport.consumer.GroupConsumer``)."""

    def committed(self, parts: Iterable[Part], timeout: float = 10.0) -> list[Offset]: ...
    def end_offset(self, part: Part, cached: bool = False, timeout: float = 30.0) -> int: ...


class MemberView(GroupView, Protocol):
    """What ``check`` reads of the worker's group member (``transport.consumer.Member``)."""

    def assignment(self) -> list[Part]: ...
    def position(self, part: Part) -> int: ...


def group_state(consumer: GroupView, topics: Iterable[str], partitions: int) -> tuple[Offsets, Offsets]:
    """A group's committed positions and its input partitions' ends (for ``check_unassigned``)."""
    parts = [Part(t, p) for t in topics for p in range(partitions)]
    committed = {(o.topic, o.partition): max(0, o.offset) for o in consumer.committed(parts, timeout=5)}
    ends: Offsets = {(p.topic, p.partition): consumer.end_offset(p, timeout=5) for p in parts}
    return committed, ends
