"""The checkpoint store interface: fenced, atomic, per key interval."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mwcore.errors import FencedError
from mwcore.store.checkpoint import Checkpoint, Snapshot
from mwcore.watermarks.report_format import interval_tag


@dataclass(frozen=True, slots=True)
class IntervalId:
    """One key interval of a computation, within a namespace (backfills use their own)."""

    namespace: str
    computation: str
    index: int

    def tag(self) -> str:
        """Redis Cluster hash tag shared by every key of the interval."""
        return interval_tag(self.namespace, self.computation, self.index)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.computation}/{self.index}"


class CheckpointStore(Protocol):
    """Where intervals keep their durable state.

    Call order for an owner: ``grant`` once when it gets the interval, ``recover``
    with that token, then any number of ``load_state`` / ``seen`` reads and
    ``commit`` writes. ``commit`` raises ``FencedError`` once a later grant exists
    (or the store restarted), and then the caller must drop the interval.
    """

    def grant(self, interval: IntervalId, owner: str) -> str:
        """Make a new, never repeated token the interval's only valid one."""
        ...

    def recover(self, interval: IntervalId, token: str) -> Snapshot:
        """Read positions, timers, pending productions and seen ids."""
        ...

    def release(self, interval: IntervalId, token: str) -> bool:
        """After a clean hand-over: the interval has no recorded owner any more (only
        while ``token`` is current; True if so)."""
        ...

    def load_state(self, interval: IntervalId, keys: Sequence[bytes]) -> list[bytes | None]:
        """The stored state of each key (None where there is none)."""
        ...

    def whole_state(self, interval: IntervalId, max_keys: int, max_bytes: int) -> dict[bytes, bytes] | None:
        """Every key's stored state, when the interval has at most ``max_keys`` keys and
        ``max_bytes`` of keys and values; None when it has more."""
        ...

    def seen(self, interval: IntervalId, record_ids: Sequence[bytes]) -> list[bool]:
        """Whether each id is in the interval's seen-id set."""
        ...

    def seen_ids(self, interval: IntervalId) -> list[bytes]:
        """Every id in the interval's seen set (to rebuild a Bloom filter)."""
        ...

    def commit(self, interval: IntervalId, token: str, checkpoint: Checkpoint) -> int:
        """Apply the checkpoint atomically if ``token`` is current; return the commit count."""
        ...

    def commit_many(self, commits: Sequence[tuple[IntervalId, str, Checkpoint]]) -> list[int | FencedError]:
        """``commit`` for several intervals at once (each atomic on its own, not all
        together): per interval its commit count, or the FencedError it was refused with."""
        ...
