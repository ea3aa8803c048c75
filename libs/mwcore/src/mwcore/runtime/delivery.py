"""How a worker's productions reach Kafka once their checkpoint is durable: through the
worker's one sender (strong and weak productions), or in each interval's transactions
(``productions="transactional"``: ``transactional.py``). The worker calls ``send`` after
each commit and when a batch is due again; an interval fenced meanwhile is handed back
to it (``on_fenced``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mwcore.api.computation import Computation
from mwcore.api.record import ID_HEADER, Production
from mwcore.errors import FencedError
from mwcore.runtime.config import Tuning, WorkerConfig
from mwcore.runtime.counters import Counters
from mwcore.runtime.faults import Faults
from mwcore.runtime.interval import Interval
from mwcore.runtime.parts import Core
from mwcore.runtime.transactional import Transactions, transactions_for
from mwcore.runtime.witness import Witness
from mwcore.transport.producer import ProductionSender, production_headers


class Delivery:
    def __init__(
        self,
        computation: Computation[Any],
        config: WorkerConfig,
        core: Core,
        witness: Witness,
        group_metadata: Callable[[], bytes | None],
        counters: Counters,
        tuning: Tuning,
        faults: Faults,
    ) -> None:
        self.sender: ProductionSender = core.sender(config.bootstrap)
        self._sent_by = ("mw-sender", config.worker_id.encode())
        self._sign = config.signer if config.signer.enabled else None
        self._counters = counters
        self.on_fenced: Callable[[Interval, FencedError], None] = _unset
        self.transactions: Transactions | None = transactions_for(
            computation,
            config,
            witness,
            group_metadata,
            (self._sent_by,),
            self._sign,
            faults,
            tuning.overlap_transactions,
        )

    @property
    def in_flight(self) -> bool:
        """A transaction is in flight (only when overlapped)."""
        return self.transactions is not None and self.transactions.in_flight

    def ready(self, interval: Interval) -> bool:
        """The interval's next checkpoint may be written (transactional: once no
        transaction of an earlier one waits or is in flight)."""
        return self.transactions is None or self.transactions.ready(interval)

    def due(self, interval: Interval) -> bool:
        """A transaction is due though no batch is (the witness of a checkpoint without
        productions); never with strong or weak productions."""
        return self.transactions is not None and self.transactions.due(interval)

    def send(self, interval: Interval) -> None:
        """Send what the interval has to send: its released batches (and a refused
        production's batch, each suspect alone first), or its transaction."""
        if self.transactions is not None:
            try:
                self._counters.productions += self.transactions.send(interval)
            except FencedError as exc:
                self.on_fenced(interval, exc)
            return
        for batch in interval.outbox.take_to_isolate():  # a production refused for good
            interval.outbox.isolate(batch, self._send_alone)
        for batch in interval.take_to_send():
            self._counters.productions += self.sender.send_all(
                batch.productions, batch, ID_HEADER, self._sent_by, sign=self._sign
            )

    def transacted(self, wait: float = 0.0) -> None:
        """Take the transactions in flight that have ended (``wait``: waiting up to that
        many seconds for all of them)."""
        if self.transactions is None:
            return
        for interval, result in self.transactions.take(wait):
            if isinstance(result, FencedError):
                self.on_fenced(interval, result)
            else:
                self._counters.productions += result

    def _send_alone(self, p: Production) -> Any:
        headers = production_headers(p, ID_HEADER, (self._sent_by,), self._sign)
        err, _ = self.sender.send_alone(p.topic, p.value, p.key, timestamp=p.timestamp, headers=headers)
        self._counters.productions += 1
        return err


def _unset(interval: Interval, exc: FencedError) -> None:
    raise exc
