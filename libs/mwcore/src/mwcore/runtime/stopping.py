"""How a worker lets its intervals go: handed over on revocation, at shutdown, or dropped
after an error.

A hand-over and a shutdown drain: commit the open batches, write the witness, wait for
Kafka's acknowledgements (briefly on revocation: the whole group's rebalance waits for
it), commit the deletion of what was acknowledged and report it, then release the
intervals in Redis. What is not acknowledged stays pending in the checkpoint and the next
owner re-sends it (its id makes that harmless). An abort commits nothing: its batches may
be half built, and the checkpoints in the store are what the next owner resumes.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import structlog

from mwcore.api.computation import Computation
from mwcore.runtime.commit_turns import CommitTurns
from mwcore.runtime.config import Tuning, WorkerConfig
from mwcore.runtime.counters import Counters
from mwcore.runtime.interval import Interval
from mwcore.runtime.latency import LatencyRecorder
from mwcore.runtime.ownership import Ownership
from mwcore.runtime.transactional import Transactions
from mwcore.runtime.watermark_reporter import WatermarkReporter
from mwcore.runtime.witness import Witness
from mwcore.store.interface import CheckpointStore
from mwcore.transport.consumer import Member
from mwcore.transport.producer import ProductionSender

log = structlog.get_logger("mwcore.runtime.worker")


class Worker(Protocol):
    """What stopping needs of the worker (``worker.py``)."""

    comp: Computation[Any]
    cfg: WorkerConfig
    tuning: Tuning
    store: CheckpointStore
    sender: ProductionSender
    consumer: Member | None
    witness: Witness
    reporter: WatermarkReporter
    ownership: Ownership
    transactions: Transactions | None
    turns: CommitTurns
    counters: Counters
    latencies: LatencyRecorder | None
    intervals: dict[int, Interval]

    def commit(self, *intervals: Interval, witness: bool = True, overlap: bool = False) -> None: ...
    def settle(self, wait: bool = True, witness: bool = True) -> None: ...
    def send(self, interval: Interval) -> None: ...
    def release_witnessed(self) -> None: ...
    def transacted(self, wait: float = 0.0) -> None: ...


# How long a revocation waits for Kafka's acknowledgements. Every member's revocation
# holds up the group's rebalance, and what is not acknowledged by then the next owner
# re-sends. The fault suite found a broker just back from a restart taking 1.4 to 2.9 s
# to acknowledge a worker's backlog, and takeovers of 3.2 to 4 s waiting for it
# (CHANGELOG.md, measured history, 2026-11-28: "Takeovers and the drain").
REVOKE_ACKS_S = 0.5
# A shutdown waits longer: with the pipeline stopping nobody may take its intervals over
# soon, and what is not acknowledged waits for the next start.
SHUTDOWN_ACKS_S = 10.0


def revoked(w: Worker, intervals: list[Interval]) -> dict[str, int]:
    """Handed over: drain, release what is still ours, and stop the Kafka client
    retrying what is still unacknowledged: the next owner re-sends it, and a copy of
    ours landing later could come after consumers forgot its id. Returns where the time
    went (milliseconds) and how many productions were purged, logged with ``revoked``."""
    took = drain(w, intervals, REVOKE_ACKS_S)
    release(w.store, [i for i in intervals if w.intervals.get(i.id.index) is i])
    left = w.sender.flush(0)
    if left:  # (a production of an interval kept fails, and its interval sends it again)
        w.sender.purge()
    return {**took, "purged": left}


def drain(w: Worker, intervals: list[Interval], flush_s: float) -> dict[str, int]:
    """Commit the intervals' batches, wait (once, for all) for Kafka's acknowledgements,
    then commit their deletion. Returns each stage's milliseconds: the commit (with the
    one in flight), the witness, the acknowledgements, the deletion. (Transactional
    productions: each wait for the intervals' transactions lasts at most ``flush_s``; an
    interval whose transaction is still in flight is left as its checkpoint has it.)"""
    marks = [time.monotonic()]
    w.transacted(flush_s)  # (transactional: the next checkpoints wait for those in flight)
    w.commit(*intervals, witness=False)
    marks.append(time.monotonic())
    witness_now(w, intervals, flush_s)
    marks.append(time.monotonic())
    w.sender.flush(flush_s)
    w.sender.poll(0)
    marks.append(time.monotonic())
    live = [i for i in intervals if i.id.index in w.intervals]
    w.commit(*[i for i in live if i.has_cleanup], witness=False)  # delete the acknowledged
    witness_now(w, live, flush_s)  # (reports show witnessed state only)
    w.reporter.step(time.monotonic(), w.intervals, force=True)
    # delete the segments just reported
    w.commit(*[i for i in live if i.has_cleanup and i.id.index in w.intervals])
    marks.append(time.monotonic())
    stages = ("commit_ms", "witness_ms", "acks_ms", "cleanup_ms")
    return {k: round((b - a) * 1000) for k, a, b in zip(stages, marks[:-1], marks[1:], strict=True)}


def witness_now(w: Worker, intervals: list[Interval], txn_wait_s: float) -> None:
    """Write the witness and wait for it (no callback is served in a hand-over), then
    send what it releases (transactional: the witness is written by each interval's
    transaction, waited for up to ``txn_wait_s``)."""
    if w.consumer is None:
        return
    if w.transactions is not None:  # the witness is written in each interval's transaction
        for interval in intervals:
            if interval.id.index in w.intervals:
                w.send(interval)
        w.transacted(txn_wait_s)
        w.release_witnessed()
        return
    for interval in intervals:  # also what asynchronous writes in flight cover
        if interval.id.index in w.intervals and not interval.is_witnessed():
            w.witness.want(interval.id.index, interval.commits, dict(interval.committed_positions))
    w.witness.flush_sync(w.consumer)
    w.release_witnessed()
    for interval in intervals:
        if interval.id.index in w.intervals:
            w.send(interval)


def release(store: CheckpointStore, intervals: list[Interval]) -> None:
    """Handed over cleanly: Redis no longer names this worker as their owner (best effort:
    the next grant names the next owner anyway)."""
    for interval in intervals:
        try:
            store.release(interval.id, interval.token)
        except Exception as exc:
            log.warning("release_failed", interval=str(interval.id), error=str(exc))


def abort(w: Worker) -> None:
    """After an error: drop every interval uncommitted, leave the group."""
    w.turns.abandon()  # let it end (or fail) before anything else talks to the store
    w.turns.close()
    w.reporter.close()
    w.ownership.clear()
    leave(w)
    w.sender.flush(5)  # committed productions in flight; resent on recovery anyway
    log.error("aborted", computation=w.comp.name, worker=w.cfg.worker_id, **vars(w.counters))


def shutdown(w: Worker) -> None:
    """Drain every interval, release them, leave the group."""
    took: dict[str, int] = {}
    if w.cfg.unsafe.skip_drain:
        w.settle()
        w.ownership.clear()  # nothing committed or drained, not even on revocation
    else:
        took = drain(w, list(w.intervals.values()), SHUTDOWN_ACKS_S)
        release(w.store, list(w.intervals.values()))
    if w.transactions is not None:
        w.transactions.close_all()
    w.turns.close()
    w.reporter.close()
    if w.consumer is not None:
        w.consumer.close()
        w.consumer = None
    log.info("stopped", computation=w.comp.name, worker=w.cfg.worker_id, **vars(w.counters), **took)
    if w.latencies is not None:
        w.latencies.write(w.tuning.latency_out)


def leave(w: Worker) -> None:
    """Leave the group (best effort: the session timeout covers a failure)."""
    if w.consumer is not None:
        try:
            w.consumer.close()
        except Exception as exc:
            log.warning("close_failed", error=str(exc))
        w.consumer = None
