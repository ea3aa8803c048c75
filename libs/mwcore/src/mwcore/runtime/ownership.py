"""The key intervals a worker owns, and how it gets and loses them.

The consumer group decides which worker owns which intervals. On assignment each new
interval is taken over: a fresh token, recovery from the store, and a check of the
store against the commit witness before anything is sent (``witness.py``: a store that
lost committed checkpoints stops the worker with ``StoreRollbackError``); its partitions
start at the checkpoint's positions (semantics I-2), never at the group's committed
offsets. On revocation the worker drains what it owns (``on_revoked``); a lost
assignment (the session expired) is dropped without a drain.

A fenced interval is dropped and taken back later, if the group still says it is ours:
after a Redis restart every token is void, so at once; after another worker's grant
this one is most likely a zombie the group is about to tell, so only after
``refence_backoff_s`` (the other grant's holder may have died).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import structlog

from mwcore.errors import FencedError
from mwcore.runtime.effects import RedoCareful
from mwcore.runtime.health import Health
from mwcore.runtime.interval import Interval
from mwcore.runtime.interval_deps import IntervalDeps
from mwcore.runtime.transactional import Transactions
from mwcore.runtime.witness import Witness
from mwcore.store.interface import IntervalId
from mwcore.transport.consumer import BEGINNING, Member, Part

log = structlog.get_logger("mwcore.runtime.worker")


class Ownership:
    def __init__(
        self,
        deps: IntervalDeps,
        topics: list[str],
        witness: Witness,
        health: Health,
        on_acquired: Callable[[Interval], None],  # re-send its pending productions
        on_revoked: Callable[[list[Interval]], dict[str, int]],  # drain: commit, flush, release
        transactions: Transactions | None = None,  # productions="transactional"
    ) -> None:
        self.deps = deps
        self.cfg = deps.config
        self.name = deps.computation.name
        self.topics = topics
        self.witness = witness
        self.health = health
        self._on_acquired = on_acquired
        self._on_revoked = on_revoked
        # With transactional productions the witness is written in the transactions
        # alone, and each interval's producer takes its transactional id over at acquisition
        self.transactions = transactions
        self.intervals: dict[int, Interval] = {}
        self.consumer: Member | None = None
        self.retakes: dict[int, float] = {}  # fenced interval -> when to try to take it back
        self.careful: dict[int, dict[str, int]] = {}  # redone interval -> where its dropped batch reached

    def join(self, consumer: Member) -> None:
        self.consumer = consumer
        consumer.subscribe(self.topics, self._on_assign, self._on_revoke, self._on_lost)

    def parts(self, index: int) -> list[Part]:
        return [Part(topic, index) for topic in self.topics]

    # -- the group's callbacks ---------------------------------------------------------------

    def _on_assign(self, parts: list[Part]) -> dict[Part, int]:
        """Take over each newly assigned interval; where each partition starts."""
        by_interval: dict[int, list[Part]] = defaultdict(list)
        for part in parts:
            by_interval[part.partition].append(part)
        starts = {}
        for index, its in by_interval.items():
            self.retakes.pop(index, None)
            interval = self.intervals.get(index) or self.acquire(index)
            for part in its:
                starts[part] = self._start_offset(interval, part)
        log.info("assigned", computation=self.name, worker=self.cfg.worker_id, intervals=sorted(by_interval))
        return starts

    def _start_offset(self, interval: Interval, part: Part) -> int:
        """Where a partition resumes: the checkpoint's position (never the group's)."""
        pos = interval.position(part.topic, part.partition)
        if pos is not None:
            return pos
        if self.deps.computation.options.start_from == "latest":
            # The partition's end as the broker has it now, assigned as an explicit offset
            # and committed with the interval's next checkpoint: a crash before the first
            # record resumes here and skips nothing written since. (The consumer's own
            # position is unknown until it has returned a record, so "the end" could not
            # be made durable before then.)
            assert self.consumer is not None
            end = self.consumer.end_offset(part)
            interval.start_at(part.topic, part.partition, end)
            return end
        return BEGINNING

    def _on_revoke(self, parts: list[Part]) -> None:
        indexes = {p.partition for p in parts}
        for index in indexes:
            self._forget(index)
        took = self._on_revoked([self.intervals[i] for i in sorted(indexes) if i in self.intervals])
        for index in indexes:
            self.intervals.pop(index, None)
            if self.transactions is not None:  # after the drain: its last transaction sent
                self.transactions.close(index)
        log.info("revoked", computation=self.name, intervals=sorted(indexes), **took)

    def _on_lost(self, parts: list[Part]) -> None:
        for p in parts:
            self.intervals.pop(p.partition, None)
            self._forget(p.partition)
            if self.transactions is not None:
                self.transactions.close(p.partition)
        log.warning("partitions_lost", computation=self.name)

    def _forget(self, index: int) -> None:
        self.retakes.pop(index, None)
        self.careful.pop(index, None)
        self.witness.forget(index)
        self.health.forget(index)

    # -- taking over -------------------------------------------------------------------------

    def acquire(self, index: int) -> Interval:
        """A fresh token, the interval recovered and checked against the witness, its
        recovered productions released as far as the witness covers them (``on_acquired``
        sends them)."""
        iid = IntervalId(self.cfg.namespace, self.name, index)
        store = self.deps.store
        t0 = time.monotonic()
        token = store.grant(iid, self.cfg.worker_id)
        if self.transactions is not None:  # an earlier owner's open transaction aborted
            self.transactions.open(index)
        snapshot = store.recover(iid, token)
        t1 = time.monotonic()
        witnessed_commits = self._witnessed_commits(iid, token, snapshot.commits)
        t2 = time.monotonic()
        interval = Interval(iid, snapshot, self.deps, careful_until=self.careful.pop(index, None))
        interval.reports.witness(witnessed_commits)
        self.intervals[index] = interval
        self.health.progressed(index)
        if self.transactions is not None:  # what the witness covers is in Kafka already
            self.transactions.recovered(interval, witnessed_commits, self._ends_of)
        elif witnessed_commits < snapshot.commits:  # re-sent productions wait for the witness to catch up
            self.witness.want(index, snapshot.commits, interval.committed_positions)
        log.info(
            "interval_acquired",
            interval=str(iid),
            token=token,
            commits=snapshot.commits,
            pending=len(snapshot.pending),
            timers=len(snapshot.timers),
            seen=len(snapshot.seen),
            state_read_whole=interval.cache.knows_all,  # MW_WHOLE_STATE_MB
            # where a takeover's time goes: grant and recovery, the witness, the rest
            store_ms=round((t1 - t0) * 1000),
            witness_ms=round((t2 - t1) * 1000),
            build_ms=round((time.monotonic() - t2) * 1000),
        )
        self._on_acquired(interval)
        return interval

    def _witnessed_commits(self, iid: IntervalId, token: str, store_commits: int) -> int:
        """What Kafka witnessed of the interval's commits; a store behind it lost
        committed checkpoints: stop (``StoreRollbackError``) before producing anything.

        The witness is read after the store, so a store behind it may only mean that the
        interval moved on in between: a taking over that took long (a slow link to
        Redis: seconds per read) outlasted this worker's membership, and the interval's
        next owner committed and witnessed more. The store is read again: if it has
        caught up with the witness, nothing was lost; this worker's token is no longer
        current, and its first commit is fenced as any zombie's."""
        self.witness.forget(iid.index)
        if self.consumer is None:
            return store_commits
        witnessed_commits = self.witness.read(self.consumer, iid.index)
        if self.cfg.accept_store_rollback or self.cfg.unsafe.ignore_rollback:
            if witnessed_commits > store_commits:
                event = "rollback_accepted" if self.cfg.accept_store_rollback else "rollback_ignored"
                log.warning(event, interval=str(iid), store=store_commits, witness=witnessed_commits)
            return min(witnessed_commits, store_commits)
        if witnessed_commits > store_commits:
            now = self.deps.store.recover(iid, token).commits
            if now >= witnessed_commits:
                log.warning(
                    "interval_moved_on",
                    interval=str(iid),
                    token=token,
                    read=store_commits,
                    store=now,
                    witness=witnessed_commits,
                )
                return witnessed_commits
        self.witness.check(str(iid), store_commits, witnessed_commits)
        return witnessed_commits

    def _ends_of(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """Each partition's end now, of ``topics`` (those the layout names: as many
        partitions as it gives them)."""
        assert self.consumer is not None
        counts = self.deps.topic_partitions
        return {(t, p): self.consumer.end_offset(Part(t, p)) for t in topics for p in range(counts.get(t, 1))}

    # -- fencing -----------------------------------------------------------------------------

    def fenced(self, interval: Interval, exc: FencedError) -> None:
        """Drop the interval's soft state, stop reading it, try to take it back later
        (only said, if it was dropped already while its commit was in flight)."""
        index = interval.id.index
        if self.intervals.get(index) is not interval:
            log.warning(
                "fenced", interval=str(interval.id), token=interval.token, reason=exc.reason, dropped=True
            )
            return
        self.intervals.pop(index, None)
        self.witness.forget(index)
        if self.transactions is not None:
            self.transactions.close(index)
        if self.consumer is not None:
            self.consumer.pause(self.parts(index))
        delay = 0.0 if exc.store_restarted else self.deps.tuning.refence_backoff_s
        if not self.cfg.unsafe.no_retake:
            self.retakes[index] = time.monotonic() + delay
        log.warning(
            "fenced",
            interval=str(interval.id),
            token=interval.token,
            reason=exc.reason,
            worker=self.cfg.worker_id,
        )

    def redo(self, interval: Interval, exc: RedoCareful) -> None:
        """Drop the interval's open batch and soft state and take it back at once, to
        redo from its checkpoint with each call's state encoded at once (``effects.py``)
        until past where the dropped batch reached."""
        index = interval.id.index
        self.intervals.pop(index, None)
        self.witness.forget(index)
        if self.transactions is not None:
            self.transactions.close(index)
        self.careful[index] = dict(interval.positions)
        if self.consumer is not None:
            self.consumer.pause(self.parts(index))
        self.retakes[index] = time.monotonic()
        log.warning("batch_redone_carefully", interval=str(interval.id), token=interval.token, error=str(exc))

    def retake_due(self) -> None:
        """Take back the fenced intervals whose time has come, if still assigned here."""
        consumer = self.consumer
        assert consumer is not None
        now = time.monotonic()
        due = [index for index, at in self.retakes.items() if now >= at]
        if not due:
            return
        assigned = set(consumer.assignment())
        for index in due:
            del self.retakes[index]
            parts = [p for p in self.parts(index) if p in assigned]
            if not parts:
                continue  # the group moved it elsewhere meanwhile
            interval = self.acquire(index)
            for part in parts:
                consumer.seek(part, self._start_offset(interval, part))  # what was fetched is stale
            consumer.resume(parts)
            log.info("interval_retaken", interval=str(interval.id), token=interval.token)

    def clear(self) -> None:
        """Drop everything owned (an abort: the store holds what the next owner resumes)."""
        self.intervals.clear()
        self.retakes.clear()
        self.careful.clear()
        if self.transactions is not None:
            self.transactions.close_all()
