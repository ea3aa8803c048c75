"""Kafka transactions for one key interval's productions (``productions="transactional"``).

Each interval owned has a transactional producer of its own, its ``transactional.id``
derived from the interval's identity (``transactional_id``). A turn sends the
interval's batches and writes its commit witness (the consumer group's offsets, with
``mw:<commits>`` as their metadata: ``runtime/witness.py``) through
``send_offsets_to_transaction``, then commits: a ``read_committed`` reader sees the
batches and the witness together, or neither.

``begin`` (``init_transactions``) bumps the id's producer epoch: whatever an earlier
owner of the interval left open is aborted by the broker there and then, and that
owner's producer is fenced for good (``ProducerFenced``). Offsets written in a
transaction carry the consumer group's generation: a member the group has moved on
from cannot write them either (KIP-447).

``commit`` returns what the broker says of a transaction (``committed``, ``retry`` or
``fenced``: what was written in an aborted transaction is never seen by a
``read_committed`` reader), and raises ``TransactionInDoubt`` only for a commit neither
confirmed nor refused in time: it is asked again until then, never aborted and sent
again. Each production's delivery
report is kept by the turn (``Tally``) and handed to its batch only once the
transaction is committed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from mwcore.api.record import Production
from mwcore.api.signing import Signer
from mwcore.transport.message import Header
from mwcore.transport.producer import production_headers, refused_for_good
from mwcore.transport.topics import producer_config, topic_name

log = structlog.get_logger("mwcore.transport")

TXN_PREFIX = "mw-txn."
# How long the broker lets a transaction stay open before it aborts it itself. A dead
# owner's open transaction is aborted by its successor's ``begin`` long before: this
# only bounds one left behind by an interval nobody takes over.
TRANSACTION_TIMEOUT_MS = 60_000
# How soon librdkafka asks again when the broker answers CONCURRENT_TRANSACTIONS: an
# interval's next transaction, begun as soon as its last one is committed, meets it
# until the coordinator has written the last one's markers. Its default (100 ms, then
# growing to retry.backoff.max.ms) was the p99 of a transactional worker's latency at
# 10,000 records/s: 106-112 ms, against 33-35 with 5 (docs/benchmarks.md).
RETRY_BACKOFF_MS = 5
# Errors of a member the group has moved on from: its offsets cannot be written, and
# the interval is another member's (or will be)
_NOT_A_MEMBER = {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.FENCED_INSTANCE_ID}
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def transactional_id(namespace: str, computation: str, index: int) -> str:
    """The interval's ``transactional.id``: under the namespace's prefix, so one
    prefixed ACL covers a pipeline's (``transport/acls.py``)."""
    return topic_name(namespace, f"{TXN_PREFIX}{computation}.{index}")


def transactional_prefix(namespace: str) -> str:
    return topic_name(namespace, TXN_PREFIX)


@dataclass
class Tally:
    """A batch's delivery reports within one transaction: where each partition's
    messages ended, how many, and what failed (``runtime.outbox.OutboxBatch.settle_all``
    takes them once the transaction is committed)."""

    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    counts: dict[tuple[str, int], int] = field(default_factory=dict)
    failures: list[tuple[Any, str, bytes | None, bytes | None]] = field(default_factory=list)

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append((err, msg.topic(), msg.key(), msg.value()))
            return
        k = (msg.topic(), msg.partition())
        end = msg.offset() + 1
        if end > self.ends.get(k, 0):
            self.ends[k] = end
        self.counts[k] = self.counts.get(k, 0) + 1


@dataclass(frozen=True)
class Outcome:
    """What became of a transaction: ``committed`` (every batch and the witness are
    visible), ``retry`` (aborted: nothing of it is visible; send it again), or
    ``fenced`` (this producer, or this member of the group, is not the interval's
    any more: drop the interval). ``refused`` holds the (topic, key, value) of
    productions the broker refused for good."""

    status: Literal["committed", "retry", "fenced"]
    tallies: list[Tally]
    error: str = ""
    refused: list[tuple[str, bytes | None, bytes | None]] = field(default_factory=list)


class TransactionInDoubt(RuntimeError):
    """A commit the broker neither confirmed nor refused in time: whether it was made is
    known only to the transaction coordinator. The process stops: the interval's next
    owner takes the id over, which completes or aborts it, and reads the witness."""

    def __init__(self, txn_id: str, error: str) -> None:
        super().__init__(f"transaction {txn_id}: its commit is neither confirmed nor refused ({error})")


def _retried(call: Callable[[], None], timeout: float, pause: float = 0.1) -> None:
    """``call`` again while it fails with an error librdkafka says to retry (not one that
    needs an abort), up to ``timeout``; the last error raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
            return
        except KafkaException as exc:
            err = _error(exc)
            again = err is not None and err.retriable() and not err.txn_requires_abort() and not err.fatal()
            if not again or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)


def _error(exc: KafkaException) -> KafkaError | None:
    err = exc.args[0] if exc.args else None
    return err if isinstance(err, KafkaError) else None


class TransactionalSender:
    """One interval's transactional producer."""

    def __init__(self, bootstrap: str, txn_id: str, **overrides: Any) -> None:
        self.txn_id = txn_id
        conf = producer_config(
            bootstrap,
            **{
                "transactional.id": txn_id,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "retry.backoff.ms": RETRY_BACKOFF_MS,
                **overrides,
            },
        )
        self._p = Producer(conf)

    def begin(self, timeout: float = 30.0) -> None:
        """Take the id over: an earlier producer's open transaction is aborted, and that
        producer fenced. Raises ``KafkaException`` when the broker does not answer in
        ``timeout`` (try again) or refuses (an ACL)."""
        self._p.init_transactions(timeout)

    def commit(
        self,
        batches: Sequence[list[Production]],
        offsets: Sequence[tuple[str, int, int, str]],
        group_metadata: bytes | None,
        id_header: str,
        *extra: Header,
        sign: Signer | None = None,
        timeout: float = 30.0,
        before_commit: Callable[[], None] | None = None,
    ) -> Outcome:
        """One transaction: every production of ``batches``, then ``offsets``
        (``(topic, partition, offset, metadata)``, written for the consumer group of
        ``group_metadata``), then (after ``before_commit``: a fault point) the commit."""
        tallies = [Tally() for _ in batches]
        try:
            self._p.begin_transaction()
            for productions, tally in zip(batches, tallies, strict=True):
                self._produce(productions, tally, id_header, extra, sign)
            if offsets:
                tps = [TopicPartition(t, p, o, metadata=m) for t, p, o, m in offsets]
                _retried(lambda: self._p.send_offsets_to_transaction(tps, group_metadata, timeout), timeout)
            if before_commit is not None:
                before_commit()
        except KafkaException as exc:
            self._serve()  # the reports of what was queued (failures name the refused)
            return self._failed(exc, tallies)
        try:
            # A commit that times out may have been made: it is asked again, never
            # aborted and sent again (a reader would see it twice)
            _retried(lambda: self._p.commit_transaction(timeout), timeout)
        except KafkaException as exc:
            self._serve()
            err = _error(exc)
            if err is not None and err.retriable() and not err.txn_requires_abort() and not err.fatal():
                raise TransactionInDoubt(self.txn_id, str(exc)) from exc
            return self._failed(exc, tallies)
        self._p.poll(0)  # every report is in: the commit flushed them
        failed = [f for t in tallies for f in t.failures]
        if failed:  # (the commit fails when a message did: not expected here)
            return Outcome("retry", tallies, f"{len(failed)} deliveries failed: {failed[0][0]}")
        return Outcome("committed", tallies)

    def _serve(self) -> None:
        """Serve the delivery reports queued (a fenced producer raises its fatal error
        again: it is the caller's already)."""
        with contextlib.suppress(KafkaException):
            self._p.poll(0)

    def _produce(
        self,
        productions: list[Production],
        tally: Tally,
        id_header: str,
        extra: Sequence[Header],
        sign: Signer | None,
    ) -> None:
        produce = self._p.produce
        for p in productions:
            headers = production_headers(p, id_header, extra, sign)
            while True:
                try:
                    produce(
                        p.topic, p.value, p.key, timestamp=p.timestamp, headers=headers, on_delivery=tally
                    )
                    break
                except BufferError:
                    self._p.poll(0.05)

    def _failed(self, exc: KafkaException, tallies: list[Tally]) -> Outcome:
        err = _error(exc)
        code = err.code() if err is not None else None
        refused = [
            (topic, key, value)
            for t in tallies
            for e, topic, key, value in t.failures
            if refused_for_good(e) is not None
        ]
        if refused_for_good(exc) is not None:  # refused outright by the client
            refused.append(("", None, None))
        if err is not None and (err.fatal() or code in _FENCED):
            return Outcome("fenced", tallies, str(exc), refused)
        fenced = code in _NOT_A_MEMBER
        if err is None or err.txn_requires_abort() or fenced or not err.retriable():
            self.abort()
        return Outcome("fenced" if fenced else "retry", tallies, str(exc), refused)

    def abort(self, timeout: float = 30.0) -> None:
        """Abort the open transaction, if any (a failure to is logged: the next
        ``begin``, ours or a successor's, aborts it)."""
        try:
            self._p.abort_transaction(timeout)
        except KafkaException as exc:
            err = _error(exc)
            if err is None or err.code() != KafkaError._STATE:  # (none open)
                log.warning("transaction_abort_failed", transactional_id=self.txn_id, error=str(exc))
        self._serve()

    def probe(self, production: Production, id_header: str, *extra: Header, timeout: float = 30.0) -> Any:
        """Send ``production`` alone in a transaction that is then aborted (no reader sees
        it): its delivery error, or None when the broker would take it."""
        tally = Tally()
        try:
            self._p.begin_transaction()
            self._produce([production], tally, id_header, extra, None)
            self._p.flush(timeout)
        except KafkaException as exc:
            self.abort()
            return exc
        self.abort()
        return tally.failures[0][0] if tally.failures else None

    def close(self, timeout: float = 5.0) -> None:
        """Let the producer go: an open transaction is left to the next ``begin``."""
        with contextlib.suppress(KafkaException):  # (fenced: nothing of it goes anywhere any more)
            self._p.purge(in_queue=True, in_flight=True, blocking=False)
        self._serve()


Senders = Callable[[str], TransactionalSender]  # transactional id -> its producer
