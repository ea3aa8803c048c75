"""A lane: calls run one at a time, in order, on a daemon thread of their own.

Each interval's transactions run on its own lane (``transactional.py``), so its producer
is used by one thread at a time, and the worker's loop goes on meanwhile. A daemon
thread: a call stuck on the broker (a transaction's round trips wait up to their
timeouts) holds neither the loop, which may give up waiting for it, nor the process's
exit. (``concurrent.futures.ThreadPoolExecutor`` joins its threads at exit.)
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

T = TypeVar("T")


class Lane(Generic[T]):
    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Future[T], Callable[[], T]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], T]) -> Future[T]:
        """Run ``call`` after those submitted before it; its result, or what it raised."""
        done: Future[T] = Future()
        self._calls.put((done, call))
        return done

    def stop(self) -> None:
        """No more calls: the thread ends once those submitted have run."""
        self._calls.put(None)

    def _run(self) -> None:
        while (item := self._calls.get()) is not None:
            done, call = item
            if not done.set_running_or_notify_cancel():
                continue
            try:
                done.set_result(call())
            except BaseException as exc:  # (handed to whoever takes the result)
                done.set_exception(exc)
