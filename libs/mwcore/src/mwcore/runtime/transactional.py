"""Transactional productions, the worker's side: each durable checkpoint's batches and its
commit witness in one Kafka transaction (``transport/transactions.py``).

Strong productions are checkpointed, then sent once the witness (written apart, by the
consumer group's commits) covers their checkpoint; after a crash the next owner sends
again what was not acknowledged, and readers outside the kit see those copies. Here the
witness is written *in* the transaction that sends the batches, so:

- **a batch and its witness become visible together or not at all**, to every
  ``read_committed`` reader;
- **one transaction at a time per interval**, committed before the interval's next
  checkpoint is written (``ready``): so the store holds at most the batches of its last
  checkpoint while the witness is one behind, and a new owner knows which reached Kafka
  (``recovered``): all of them when the witness covers the store's last checkpoint, none
  when it is one behind (they are sent again, in a transaction of the new owner's);
- **a zombie is fenced twice**: the new owner's ``begin`` bumps the producer epoch of the
  interval's transactional id (the zombie's open transaction is aborted, its next one
  refused) besides the store's sequencer token; and the group's generation refuses its
  offsets.

A transaction is either waited for, or (``overlap``: on the interval's own lane, a
thread of its own, while the worker's loop goes on, as commit turns are) sent and its
outcome taken at a later turn of the loop (``take``); either way at most one per
interval is in flight, and everything about the interval (its batches settled or put
back, the witness confirmed, the interval dropped when fenced) happens on the loop's
thread. Only the round trips to the broker run on the lane, so the producer of an
interval is used by one thread at a time.

Letting an interval go waits for its transaction in flight only so long (a drain: as
long as it waits for acknowledgements; dropping the interval: ``CLOSE_WAIT_S``). A
transaction stuck on the broker (one in flight when the broker restarted can wait out
its round trips' timeouts) is left to end on its lane: whatever it did is settled by
the interval's next owner, whose producer takes the id over (it completes a commit
the coordinator had begun, or aborts the transaction, and fences this producer) before
it reads the witness.

A transaction the broker aborts (a broker restarting, a timeout) is sent again whole
after ``RETRY_S``; its interval's next checkpoint waits for it. One with a production
the broker refuses for good (too large, a timestamp out of its window) is aborted, each
suspect production tried alone in a transaction that is aborted in any case
(``TransactionalSender.probe``), one refused replaced by its dead letter, and the batch
sent again.

The negative control ``MW_UNSAFE_WITNESS_OUTSIDE_TXN`` commits the transaction without
the offsets and writes the witness after it, as strong productions do: a crash between
the two leaves batches in Kafka the witness does not cover, which the next owner sends
again (readers outside the kit see each twice).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_on
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from mwcore.api.computation import Computation
from mwcore.api.record import ID_HEADER, Production
from mwcore.api.signing import Signer
from mwcore.errors import FencedError
from mwcore.runtime.config import WorkerConfig
from mwcore.runtime.faults import NO_FAULTS, Faults
from mwcore.runtime.interval import Interval
from mwcore.runtime.lane import Lane
from mwcore.runtime.outbox import OutboxBatch
from mwcore.runtime.witness import Witness, encode
from mwcore.transport.message import Header
from mwcore.transport.producer import refused_for_good
from mwcore.transport.transactions import Outcome, TransactionalSender, transactional_id

log = structlog.get_logger("mwcore.runtime.worker")

RETRY_S = 0.2  # after an aborted transaction, the next try waits this long
CLOSE_WAIT_S = 1.0  # dropping an interval waits this long for its transaction in flight


class TxnSender(Protocol):
    """What a turn needs of the interval's producer (``TransactionalSender``)."""

    def begin(self, timeout: float = ...) -> None: ...
    def commit(
        self,
        batches: list[list[Production]],
        offsets: list[tuple[str, int, int, str]],
        group_metadata: bytes | None,
        id_header: str,
        *extra: Header,
        sign: Signer | None = ...,
        timeout: float = ...,
        before_commit: Callable[[], None] | None = ...,
    ) -> Outcome: ...
    def probe(self, production: Production, id_header: str, *extra: Header, timeout: float = ...) -> Any: ...
    def close(self, timeout: float = ...) -> None: ...


# Where a recovered batch's records may be: (topic, partition) -> that partition's end now
EndsOf = Callable[[list[str]], dict[tuple[str, int], int]]
# What became of a transaction taken: the productions it committed, or the interval fenced
Result = int | FencedError


@dataclass
class _Flight:
    """A transaction sent on the pool: its interval, batches and checkpoint."""

    interval: Interval
    batches: list[OutboxBatch]
    commits: int
    outcome: Future[Outcome]


class Transactions:
    """The transactional producers of one worker's intervals, and their turns."""

    def __init__(
        self,
        namespace: str,
        computation: str,
        make_sender: Callable[[str], TxnSender],
        witness: Witness,
        group_metadata: Callable[[], bytes | None],
        id_header: str,
        extra: tuple[Header, ...],
        sign: Signer | None,
        witness_outside: bool = False,
        faults: Faults = NO_FAULTS,
        clock: Callable[[], float] = time.monotonic,
        overlap: bool = False,
    ) -> None:
        self.namespace = namespace
        self.computation = computation
        self._make = make_sender
        self.witness = witness
        self._group_metadata = group_metadata
        self._id_header = id_header
        self._extra = extra
        self._sign = sign
        self._witness_outside = witness_outside  # the negative control
        self._faults = faults
        self._clock = clock
        self.overlapping = overlap
        self.senders: dict[int, TxnSender] = {}
        self._retry_at: dict[int, float] = {}
        self._flights: dict[int, _Flight] = {}
        self._lanes: dict[int, Lane[Outcome]] = {}  # overlapped: each interval's own thread
        self.committed = 0  # transactions committed (for metrics and tests)
        self.aborted = 0

    # -- ownership -------------------------------------------------------------------------

    def open(self, index: int) -> None:
        """The interval's producer, its id taken over (before its witness is read: an
        earlier owner's open transaction is aborted, so the witness read is final)."""
        self.close(index)
        sender = self._make(transactional_id(self.namespace, self.computation, index))
        sender.begin()
        self.senders[index] = sender

    def close(self, index: int) -> None:
        """Let the interval's producer go, once its transaction in flight has ended or
        ``CLOSE_WAIT_S`` has passed (what became of it is the next owner's to read in the
        witness); a transaction still in flight then is left to end on its lane, with
        the producer it uses."""
        self._retry_at.pop(index, None)
        flight = self._flights.pop(index, None)
        lane = self._lanes.pop(index, None)
        if lane is not None:
            lane.stop()
        sender = self.senders.pop(index, None)
        if flight is not None and not self._ended(flight, CLOSE_WAIT_S):
            return  # (not closed under it: fenced by the next owner's producer, it ends)
        if sender is not None:
            sender.close()

    def _ended(self, flight: _Flight, timeout: float) -> bool:
        """Whether the dropped interval's transaction ended within ``timeout`` (said)."""
        name = str(flight.interval.id)
        try:
            outcome = flight.outcome.result(timeout)
        except TimeoutError:
            log.warning("transaction_abandoned", interval=name, waited_s=timeout)
            return False
        except BaseException as exc:  # (the outcome is dropped with the interval)
            log.warning("transaction_dropped", interval=name, error=str(exc))
            return True
        if outcome.status == "fenced":  # (said as when it is taken)
            log.warning("transaction_fenced", interval=name, error=outcome.error, dropped=True)
        return True

    def close_all(self) -> None:
        for index in list(self.senders):
            self.close(index)

    @property
    def in_flight(self) -> bool:
        return bool(self._flights)

    def recovered(self, interval: Interval, witnessed: int, ends_of: EndsOf) -> int:
        """A new owner's recovered batches, against the witness it read: when a
        transaction wrote a witness that covers them they are in Kafka (settled as
        delivered, their segments as far as each output partition's end now: a bound
        for the watermarks that is never too new); else they wait for this owner's first
        transaction. (A witness written otherwise, by a strong owner before the
        computation became transactional, covers productions released, not delivered:
        they are sent again.) How many were settled."""
        index = interval.id.index
        self.witness.confirm(index, min(witnessed, interval.commits))
        if witnessed < interval.commits or not self.witness.transactional.get(index, False):
            log.debug("transaction_recovered", interval=str(interval.id), witness=witnessed, settled=0)
            return 0
        batches = interval.outbox.take_unsent()
        if not batches:
            return 0
        topics = sorted({p.topic for b in batches for p in b.productions})
        ends = ends_of(topics)
        for b in batches:
            written = {p.topic for p in b.productions}
            mine = {k: e for k, e in ends.items() if k[0] in written}
            b.settle_all([], mine, dict.fromkeys(mine, len(b.productions)))
        log.debug("transaction_recovered", interval=str(interval.id), witness=witnessed, settled=len(batches))
        return len(batches)

    # -- turns -----------------------------------------------------------------------------

    def ready(self, interval: Interval) -> bool:
        """The interval's next checkpoint may be written: no batch of an earlier one
        waits for its transaction, and none is in flight (so the store never holds
        batches of two checkpoints the witness does not cover: ``recovered`` relies on
        it)."""
        return not interval.outbox.has_unsent and interval.id.index not in self._flights

    def due(self, interval: Interval) -> bool:
        """A transaction is to be sent: batches wait for one, or the witness is behind
        the last checkpoint (one without productions: its watermark report waits for
        the witness); none is in flight, and no aborted one is waiting out ``RETRY_S``."""
        index = interval.id.index
        if index in self._flights or self._clock() < self._retry_at.get(index, 0.0):
            return False
        if interval.outbox.has_unsent:
            return True
        return bool(interval.committed_positions) and self.witness.confirmed.get(index, -1) < interval.commits

    def send(self, interval: Interval) -> int:
        """The interval's transaction, if it has something to send or a witness to
        write: its unsent batches and the witness of its last checkpoint. Waited for, it
        returns how many productions it committed, and raises ``FencedError`` when the
        interval is not this worker's any more; overlapping, it returns 0 at once and
        ``take`` says what became of it."""
        index = interval.id.index
        sender = self.senders.get(index)
        if sender is None or not self.due(interval):
            return 0
        commits = interval.commits
        name = str(interval.id)
        batches = interval.outbox.take_unsent()
        call = functools.partial(
            sender.commit,
            [b.productions for b in batches],
            [] if self._witness_outside else self._offsets(index, commits, interval.committed_positions),
            self._group_metadata(),  # (the consumer's: read on this thread)
            self._id_header,
            *self._extra,
            sign=self._sign,
            before_commit=lambda: self._faults.point("in_transaction", lambda: {"interval": name}),
        )
        if not self.overlapping:
            return self._outcome(interval, batches, commits, call())
        lane = self._lanes.get(index)
        if lane is None:
            lane = self._lanes[index] = Lane(f"mw-txn-{index}")
        self._flights[index] = _Flight(interval, batches, commits, lane.submit(call))
        return 0

    def take(self, wait: float = 0.0) -> list[tuple[Interval, Result]]:
        """The transactions in flight that have ended, each settled: its interval and
        what became of it; ``wait``: waiting up to that many seconds for all of them to
        end. Raises what a round trip raised (``TransactionInDoubt``: the process
        stops)."""
        if wait > 0 and self._flights:
            wait_on([f.outcome for f in self._flights.values()], timeout=wait)
        out: list[tuple[Interval, Result]] = []
        for index, flight in list(self._flights.items()):
            if not flight.outcome.done():
                continue
            outcome = flight.outcome.result()
            del self._flights[index]
            try:
                out.append(
                    (flight.interval, self._outcome(flight.interval, flight.batches, flight.commits, outcome))
                )
            except FencedError as exc:
                out.append((flight.interval, exc))
        return out

    def _outcome(self, interval: Interval, batches: list[OutboxBatch], commits: int, outcome: Outcome) -> int:
        """What a transaction's outcome does to its interval (on the loop's thread): its
        batches settled and its witness confirmed, or put back to be sent again; how
        many productions it committed. Raises ``FencedError``."""
        index = interval.id.index
        name = str(interval.id)
        if outcome.status == "committed":
            n = sum(len(b.productions) for b in batches)
            log.debug("transaction_committed", interval=name, commits=commits, productions=n)
            self._faults.point("after_transaction", lambda: {"interval": name})
            self.committed += 1
            for batch, tally in zip(batches, outcome.tallies, strict=True):
                batch.settle_all([], tally.ends, tally.counts)
            if self._witness_outside:
                self.witness.want(index, commits, dict(interval.committed_positions))
            else:
                self.witness.confirm(index, commits)
            return n
        self.aborted += 1
        interval.outbox.put_back(batches)
        if outcome.status == "fenced":
            log.warning("transaction_fenced", interval=name, error=outcome.error)
            raise FencedError(name, interval.token, "transaction")
        self._retry_at[index] = self._clock() + RETRY_S
        log.warning("transaction_aborted", interval=name, error=outcome.error)
        sender = self.senders.get(index)
        if outcome.refused and sender is not None:
            self._isolate(interval, sender, batches, set(outcome.refused))
        return 0

    def _offsets(
        self, index: int, commits: int, positions: dict[str, int]
    ) -> list[tuple[str, int, int, str]]:
        signer = self.witness.signer
        out = []
        for fld, off in positions.items():
            topic, _, part = fld.rpartition(":")
            assert int(part) == index, fld
            out.append((topic, index, off, encode(commits, signer, topic, index, transactional=True)))
        return out

    def _isolate(
        self,
        interval: Interval,
        sender: TxnSender,
        batches: list[OutboxBatch],
        suspects: set[tuple[str, bytes | None, bytes | None]],
    ) -> None:
        """Try each suspect production alone (in a transaction aborted in any case);
        replace one the broker refuses for good by its dead letter."""
        anything = ("", None, None) in suspects  # refused by the client: its fields unknown
        for batch in batches:
            for i, p in enumerate(batch.productions):
                if not anything and (p.topic, p.key, p.value) not in suspects:
                    continue
                err = sender.probe(p, self._id_header, *self._extra)
                why = refused_for_good(err) if err is not None else None
                if why is not None:
                    batch.productions[i] = interval.refuse(p, why, str(err))


def transactions_for(
    computation: Computation[Any],
    config: WorkerConfig,
    witness: Witness,
    group_metadata: Callable[[], bytes | None],
    extra: tuple[Header, ...],
    sign: Signer | None,
    faults: Faults = NO_FAULTS,
    overlap: bool = False,
) -> Transactions | None:
    """The worker's transactions, when its computation's productions are transactional."""
    if computation.options.productions != "transactional":
        return None
    return Transactions(
        config.namespace,
        computation.name,
        lambda txn_id: TransactionalSender(config.bootstrap, txn_id),
        witness,
        group_metadata,
        ID_HEADER,
        extra,
        sign,
        witness_outside=config.unsafe.witness_outside_txn,
        faults=faults,
        overlap=overlap,
    )
