"""Sending records to Kafka, on confluent-kafka.

``send`` and ``send_all`` never lose a record to a full local queue: they serve
delivery reports until there is room. ``send_all`` (the worker's productions) reports a
record the client refuses outright to its delivery callback as failed (the caller sends
it again), so every production sent gets exactly one callback. Delivery callbacks run
inside ``poll`` and ``flush``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import structlog
from confluent_kafka import KafkaException, Producer

from mwcore.api.record import Production
from mwcore.api.signing import MAC_HEADER
from mwcore.transport.message import Header
from mwcore.transport.topics import producer_config

log = structlog.get_logger("mwcore.transport")

OnDelivery = Callable[[Any, Any], None]  # (error or None, the message: topic(), partition(), offset())


class Sender:
    def __init__(self, bootstrap: str, **overrides: Any) -> None:
        self._p = Producer(producer_config(bootstrap, **overrides))

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        timestamp: int = 0,
        headers: Sequence[tuple[str, str | bytes | None]] = (),
        on_delivery: OnDelivery | None = None,
    ) -> None:
        """Queue one record (``timestamp`` 0: the producer's clock; ``value`` None: a
        tombstone). A record the client refuses outright raises."""
        while True:
            try:
                self._p.produce(
                    topic, value, key, timestamp=timestamp, headers=list(headers), on_delivery=on_delivery
                )
                return
            except BufferError:
                self._p.poll(0.05)

    def send_all(
        self,
        productions: Iterable[Production],
        on_delivery: OnDelivery,
        id_header: str,
        *extra: Header,
        sign: Callable[[bytes], bytes] | None = None,
    ) -> int:
        """Queue productions, each with its id in ``id_header`` (and, with ``sign``, the
        id's MAC in ``MAC_HEADER``), then ``extra`` headers and its own; the number queued."""
        produce = self._p.produce
        n = 0
        for p in productions:
            headers: list[tuple[str, str | bytes | None]] = [(id_header, p.id), *extra]
            if sign is not None:
                headers.append((MAC_HEADER, sign(p.id)))
            if p.headers:
                headers += p.headers
            while True:
                try:
                    produce(
                        p.topic,
                        p.value,
                        p.key,
                        timestamp=p.timestamp,
                        headers=headers,
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    self._p.poll(0.05)
                except KafkaException as exc:  # refused outright: count it as failed, retry later
                    log.error("produce_refused", topic=p.topic, error=str(exc))
                    on_delivery(exc, None)
                    break
            n += 1
        return n

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports (waiting up to ``timeout`` for one)."""
        return int(self._p.poll(timeout))

    def flush(self, timeout: float) -> int:
        """Wait until every queued record is delivered or ``timeout`` passes; how many are left."""
        return int(self._p.flush(timeout))
