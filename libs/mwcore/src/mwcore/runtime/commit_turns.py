"""Commit turns: the one fenced round trip that commits a set of intervals' checkpoints.

A turn is either waited for, or (overlapping commits, the default) sent on a
thread of its own while the worker's loop goes on; its results are then taken at a later
turn of the loop (``take``). At most one turn is in flight: the worker takes it before
it prepares the next, redoes a batch or drains. What a turn's results do (productions
sent, the witness written, fenced intervals dropped) is the worker's.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import structlog

from mwcore.errors import FencedError
from mwcore.runtime.interval import Interval, PreparedCommit
from mwcore.store.interface import CheckpointStore

log = structlog.get_logger("mwcore.runtime.worker")

Prepared = list[tuple[Interval, PreparedCommit]]
Results = list[int | FencedError]


class Turn(NamedTuple):
    """A commit turn: what was prepared, the store's answer for each, when it was sent."""

    prepared: Prepared
    results: Results
    began: float


class _InFlight(NamedTuple):
    prepared: Prepared
    results: Future[Results]
    began: float


class CommitTurns:
    def __init__(self, store: CheckpointStore, overlap: bool) -> None:
        self.store = store
        self.overlapping = overlap
        self._in_flight: _InFlight | None = None
        self._executor: ThreadPoolExecutor | None = None  # made at the first turn sent on it

    @property
    def in_flight(self) -> bool:
        return self._in_flight is not None

    def run(self, prepared: Prepared, overlap: bool) -> Turn | None:
        """Send the turn: with ``overlap`` (and overlapping commits on) return at once
        (``take`` gives it later), else wait and return it. Only when none is in flight."""
        assert self._in_flight is None, "take the turn in flight first"
        began = time.monotonic()
        commits = [(i.id, i.token, p.checkpoint) for i, p in prepared]
        if overlap and self.overlapping:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="mw-commit")
            self._in_flight = _InFlight(
                prepared, self._executor.submit(self.store.commit_many, commits), began
            )
            return None
        return Turn(prepared, self.store.commit_many(commits), began)

    def take(self, wait: bool = True) -> Turn | None:
        """The turn in flight, once done (``wait``: waiting for it; else ``None`` while
        it runs). Raises what its round trip raised."""
        flight = self._in_flight
        if flight is None or not (wait or flight.results.done()):
            return None
        try:
            results = flight.results.result()
        finally:  # (an interrupted wait leaves it to ``abandon``)
            if flight.results.done():
                self._in_flight = None
        return Turn(flight.prepared, results, flight.began)

    def abandon(self, timeout: float = 30) -> None:
        """Drop the turn in flight, after letting it end (or fail): nothing else may talk
        to the store meanwhile. Its intervals' next owner resumes from the store."""
        flight, self._in_flight = self._in_flight, None
        if flight is not None:
            try:
                flight.results.result(timeout=timeout)
            except Exception as exc:
                log.warning("commit_in_flight_failed", error=str(exc))

    def close(self) -> None:
        """No more turns for now: the thread ends (at once, or when the round trip it
        is in answers). A turn sent after starts another."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
