"""The commit witness: each interval's checkpoint count, recorded outside the store.

A store can lose committed checkpoints: Redis run without ``appendfsync always`` loses
the tail of its append-only file in a crash, a restore from a backup goes back further,
a failover can promote a replica that lagged. Resumed from such a store, an interval
would process its input again from an older state and could produce a *different*
payload under an id it already produced (semantics I-3 forbids it).

So after each checkpoint the worker records the interval's commit count in Kafka, in
the metadata of the consumer group's committed offsets (``mw:<commits>``; the offsets
themselves are the checkpoint's positions, which lag tools read as before). Kafka keeps
them apart from the store, and a member fenced out of the group cannot write them.

- **Detection.** A new owner compares the store's count with the witness before it
  sends anything (``check``): fewer commits in the store than Kafka has seen means the
  store lost committed checkpoints, and the worker stops with ``StoreRollbackError``.
- **Gating.** A checkpoint's productions, and watermark reports of its state, wait
  until the witness covers it (``confirmed``): whatever the world has seen from a
  checkpoint, the witness proves it was committed. A rollback that the witness does not
  see therefore only loses checkpoints nothing was produced from; processing them again
  produces what was never sent.

Witness writes are asynchronous and many may be in flight; each carries its counts, so
the confirmation (the consumer's ``on_commit`` callback) says exactly what it covers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from mwcore.errors import StoreRollbackError
from mwcore.transport.consumer import Offset, Part

_PREFIX = "mw:"


class Committer(Protocol):
    """What the witness needs of the group member (``transport.consumer.GroupConsumer``)."""

    def commit(self, offsets: Sequence[Offset], asynchronous: bool = True) -> None: ...
    def committed(self, parts: Iterable[Part], timeout: float = 10.0) -> list[Offset]: ...


def encode(commits: int) -> str:
    return f"{_PREFIX}{commits}"


def decode(metadata: str | None) -> int:
    """The commit count in an offset's metadata (0: none, or written by something else)."""
    if not metadata or not metadata.startswith(_PREFIX):
        return 0
    try:
        return int(metadata[len(_PREFIX) :])
    except ValueError:
        return 0


class Witness:
    """Witness writes of one worker, and what Kafka has confirmed, per interval index."""

    def __init__(self, topics: Iterable[str]) -> None:
        self.topics = list(topics)
        self.confirmed: dict[int, int] = {}  # index -> highest commit count Kafka confirmed
        self._wanted: dict[int, tuple[int, dict[str, int]]] = {}  # index -> (commits, positions)
        self.newly_confirmed: set[int] = set()  # indexes whose confirmation moved (for the worker)

    # -- writes ----------------------------------------------------------------------------

    def want(self, index: int, commits: int, positions: dict[str, int]) -> None:
        """Record ``commits`` for the interval at its next flush. An interval that has
        read nothing has no offsets to carry the count: it is confirmed at once (it has
        no input to process again from an older state)."""
        if not positions:
            self._confirm(index, commits)
            return
        self._wanted[index] = (commits, positions)

    def forget(self, index: int) -> None:
        self._wanted.pop(index, None)
        self.confirmed.pop(index, None)
        self.newly_confirmed.discard(index)

    def _offsets(self) -> list[Offset]:
        offsets = []
        for index, (commits, positions) in self._wanted.items():
            meta = encode(commits)
            for fld, off in positions.items():
                topic, _, part = fld.rpartition(":")
                assert int(part) == index, fld
                offsets.append(Offset(topic, index, off, meta))
        self._wanted = {}
        return offsets

    def flush(self, consumer: Committer) -> None:
        """Write what is wanted, asynchronously (``on_committed`` confirms)."""
        if self._wanted:
            consumer.commit(self._offsets(), asynchronous=True)

    def flush_sync(self, consumer: Committer) -> None:
        """Write what is wanted and wait (a hand-over: no callback will be served)."""
        if self._wanted:
            consumer.commit(self._offsets(), asynchronous=False)

    def on_committed(self, offsets: list[Offset]) -> None:
        """What Kafka confirmed (the group member's ``on_committed``)."""
        for o in offsets:
            self._confirm(o.partition, decode(o.metadata))

    def _confirm(self, index: int, commits: int) -> None:
        if commits > self.confirmed.get(index, -1):
            self.confirmed[index] = commits
            self.newly_confirmed.add(index)

    # -- reads -----------------------------------------------------------------------------

    def read(self, consumer: Committer, index: int, timeout: float = 10.0) -> int:
        """The highest commit count Kafka holds for the interval (0: none)."""
        offsets = consumer.committed([Part(t, index) for t in self.topics], timeout=timeout)
        return max((decode(o.metadata) for o in offsets), default=0)

    def check(self, interval: str, store_commits: int, witnessed: int) -> None:
        if store_commits < witnessed:
            raise StoreRollbackError(interval, store_commits, witnessed)
