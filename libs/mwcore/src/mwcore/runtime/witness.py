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

Witness writes are asynchronous, one in flight at a time (``Witness``); each carries its
counts, so the confirmation (the consumer's ``on_commit`` callback) says exactly what it
covers.

Anyone who can commit offsets for the group could write a count: a huge one would stop
every takeover of the interval. With a pipeline secret (``api/signing.py``) a count
carries its MAC (``mw:<commits>:<mac>``, bound to the topic and partition), and one that
does not verify is skipped and counted (``transport/rejections.py``), as if none were
there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from mwcore.api.signing import UNSIGNED, Signer
from mwcore.errors import RejectedRecord, StoreRollbackError
from mwcore.transport.consumer import Offset, Part
from mwcore.transport.rejections import REJECTED

_PREFIX = "mw:"


class Committer(Protocol):
    """What the witness needs of the group member (``transport.consumer.GroupConsumer``)."""

    def commit(self, offsets: Sequence[Offset], asynchronous: bool = True) -> bool: ...
    def committed(self, parts: Iterable[Part], timeout: float = 10.0) -> list[Offset]: ...


_TXN = "t"  # after the count: written in a transaction with the checkpoint's productions


def _mac(signer: Signer, topic: str, partition: int, count: str) -> str:
    return signer.mac(b"mw-witness", f"{topic}\0{partition}\0{count}".encode()).hex()


def encode(
    commits: int, signer: Signer = UNSIGNED, topic: str = "", partition: int = 0, transactional: bool = False
) -> str:
    """``mw:<commits>`` (``t`` after it when written in a transaction with the
    checkpoint's productions: they are in Kafka), and with a secret its MAC."""
    count = f"{commits}{_TXN if transactional else ''}"
    if not signer.enabled:
        return f"{_PREFIX}{count}"
    return f"{_PREFIX}{count}:{_mac(signer, topic, partition, count)}"


def decode_mark(
    metadata: str | None, signer: Signer = UNSIGNED, topic: str = "", partition: int = 0
) -> tuple[int, bool]:
    """The commit count in an offset's metadata (0: none, written by something else, or
    with a secret, not signed with it), and whether it was written in a transaction.
    (confluent-kafka's ``send_offsets_to_transaction`` writes the metadata with its C
    string's NUL, which librdkafka's reader of the native core keeps: it is dropped.)"""
    if metadata:
        metadata = metadata.rstrip("\x00")
    if not metadata or not metadata.startswith(_PREFIX) or len(metadata) > 200:
        return 0, False
    count, _, mac = metadata[len(_PREFIX) :].partition(":")
    digits = count.removesuffix(_TXN)
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 18):
        return 0, False
    if signer.enabled and mac != _mac(signer, topic, partition, count):
        REJECTED.reject(topic, partition, -1, RejectedRecord("bad_mac", f"witness {count[:40]}"))
        return 0, False
    return int(digits), digits != count


def decode(metadata: str | None, signer: Signer = UNSIGNED, topic: str = "", partition: int = 0) -> int:
    """The commit count alone (``decode_mark``)."""
    return decode_mark(metadata, signer, topic, partition)[0]


class Witness:
    """Witness writes of one worker, and what Kafka has confirmed, per interval index.

    One write is in flight at a time; what is wanted meanwhile is coalesced into the
    next one, sent as soon as the broker answers. The group coordinator handles a
    member's offset commits one after another, so a write per commit (a hundred a
    second under load) queued up behind each other and a checkpoint waited seconds for
    its witness; coalesced, it waits one or two round trips.
    """

    def __init__(
        self,
        topics: Iterable[str],
        clock: Callable[[], float] = time.monotonic,
        answer_timeout_s: float = 10.0,
        retry_s: float = 0.05,
        signer: Signer = UNSIGNED,
    ) -> None:
        self.topics = list(topics)
        self.signer = signer
        self.confirmed: dict[int, int] = {}  # index -> highest commit count Kafka confirmed
        # index -> whether the count ``read`` found was written in a transaction
        self.transactional: dict[int, bool] = {}
        self._wanted: dict[int, tuple[int, dict[str, int]]] = {}  # index -> (commits, positions)
        self.newly_confirmed: set[int] = set()  # indexes whose confirmation moved (for the worker)
        self._clock = clock
        self._answer_timeout_s = answer_timeout_s  # a write never answered stops blocking after it
        self._retry_s = retry_s  # after a failed write, the next waits this long
        self._in_flight: dict[int, tuple[int, dict[str, int]]] = {}  # the write awaiting its answer
        self._sent_at: float | None = None
        self._not_before = 0.0

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
        self._in_flight.pop(index, None)
        self.confirmed.pop(index, None)
        self.transactional.pop(index, None)
        self.newly_confirmed.discard(index)

    @property
    def in_flight(self) -> bool:
        """A write awaits its answer (what is wanted meanwhile waits for it)."""
        return self._sent_at is not None and self._clock() - self._sent_at < self._answer_timeout_s

    def _offsets(self, wanted: dict[int, tuple[int, dict[str, int]]]) -> list[Offset]:
        offsets = []
        for index, (commits, positions) in wanted.items():
            for fld, off in positions.items():
                topic, _, part = fld.rpartition(":")
                assert int(part) == index, fld
                offsets.append(Offset(topic, index, off, encode(commits, self.signer, topic, index)))
        return offsets

    def flush(self, consumer: Committer) -> None:
        """Write what is wanted, asynchronously (``on_committed`` confirms), unless a
        write is in flight: then with the next flush after its answer."""
        if not self._wanted or self.in_flight or self._clock() < self._not_before:
            return
        wanted, self._wanted = self._wanted, {}
        if consumer.commit(self._offsets(wanted), asynchronous=True):
            self._in_flight = wanted
            self._sent_at = self._clock()
        else:
            self._retry(wanted)

    def flush_sync(self, consumer: Committer) -> None:
        """Write what is wanted and wait (a hand-over: no callback will be served)."""
        if self._wanted:
            wanted, self._wanted = self._wanted, {}
            if not consumer.commit(self._offsets(wanted), asynchronous=False):
                self._retry(wanted)

    def on_committed(self, offsets: list[Offset]) -> None:
        """The answer to a write: what Kafka confirmed (the group member's
        ``on_committed``; a part that failed is left out, and written again)."""
        for o in offsets:
            self._confirm(o.partition, decode(o.metadata, self.signer, o.topic, o.partition))
        sent, self._in_flight, self._sent_at = self._in_flight, {}, None
        failed = {i: w for i, w in sent.items() if self.confirmed.get(i, -1) < w[0]}
        if failed:
            self._retry(failed)

    def _retry(self, failed: dict[int, tuple[int, dict[str, int]]]) -> None:
        """Write ``failed`` again with the next flush (a newer want of an index wins)."""
        self._not_before = self._clock() + self._retry_s
        for index, w in failed.items():
            self._wanted.setdefault(index, w)

    def confirm(self, index: int, commits: int) -> None:
        """Kafka holds ``commits`` for the interval, written otherwise than by this
        class (in a transaction: ``runtime/transactional.py``)."""
        self._confirm(index, commits)

    def _confirm(self, index: int, commits: int) -> None:
        if commits > self.confirmed.get(index, -1):
            self.confirmed[index] = commits
            self.newly_confirmed.add(index)

    # -- reads -----------------------------------------------------------------------------

    def read(self, consumer: Committer, index: int, timeout: float = 10.0) -> int:
        """The highest commit count Kafka holds for the interval (0: none); whether it was
        written in a transaction is kept in ``transactional``."""
        offsets = consumer.committed([Part(t, index) for t in self.topics], timeout=timeout)
        marks = [decode_mark(o.metadata, self.signer, o.topic, o.partition) for o in offsets]
        commits, txn = max(marks, default=(0, False))
        self.transactional[index] = txn
        return commits

    def check(self, interval: str, store_commits: int, witnessed_commits: int) -> None:
        if store_commits < witnessed_commits:
            raise StoreRollbackError(interval, store_commits, witnessed_commits)
