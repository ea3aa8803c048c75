"""Runs the workers of one process (a computation and its rekey stages) in one loop."""

from __future__ import annotations

from collections.abc import Callable

from mwcore.worker import Worker


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
        # Stages feed the computation; the order does not matter for correctness.
        for w in self.workers:
            w.shutdown()
