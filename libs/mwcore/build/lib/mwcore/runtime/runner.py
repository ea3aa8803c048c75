"""Runs the workers of one process (a computation and its rekey stages) in one loop."""

from __future__ import annotations

import gc
from collections.abc import Callable

from mwcore.runtime.worker import Worker


def tune_gc(threshold: int) -> None:
    """Tune CPython's cycle collector for a worker process (``threshold`` 0: leave it).

    The per-record path makes no reference cycles, but it allocates several container
    objects per record, so with the default threshold (700) the collector runs every
    hundred records or so and its older generations rescan the long-lived objects (the
    state cache, the open batch) again and again. Objects made during set-up are frozen
    out of collection, and the young generation is collected every ``threshold``
    allocations instead (cycles, if any, are still reclaimed)."""
    if threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, 20, 20)


class Runner:
    def __init__(self, workers: list[Worker], on_step: Callable[[], None] = lambda: None) -> None:
        self.workers = workers
        self.on_step = on_step  # each turn of the loop (the liveness check)
        self._stopping = False

    def stop(self) -> None:
        self._stopping = True

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        for w in self.workers:
            w.start()
        try:
            while not (self._stopping or should_stop()):
                for w in self.workers:
                    w.step()
                self.on_step()
        except BaseException:
            for w in self.workers:  # never commit a batch an error interrupted
                w.abort()
            raise
        # Stages feed the computation; the order does not matter for correctness. A
        # drain that fails still lets every worker leave its group (no session-timeout
        # wait for the others); the first error is raised after.
        error: BaseException | None = None
        for w in self.workers:
            try:
                w.shutdown()
            except BaseException as exc:
                error = error or exc
                w.abort()
        if error is not None:
            raise error
