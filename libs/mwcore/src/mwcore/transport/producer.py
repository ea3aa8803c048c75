"""Sending records to Kafka, on confluent-kafka.

``send`` and ``send_all`` never lose a record to a full local queue: they serve
delivery reports until there is room. ``send_all`` (the worker's productions) reports a
record the client refuses outright to its delivery callback as failed (the caller sends
it again), so every production sent gets exactly one callback. Delivery callbacks run
inside ``poll`` and ``flush``.

A delivery report carries the record's topic, key and value, never its headers (nor,
when it failed, its timestamp): a caller that may send a record again keeps those
itself. The broker refuses a whole batch for one bad record in it (a timestamp out of
its window), so a refusal ``refused_for_good`` names may be a batchmate's fault:
``send_alone`` sends the record in a request of its own to learn its own fate before
anyone calls it refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import structlog
from confluent_kafka import KafkaError, KafkaException, Producer

from mwcore.api.record import ID_HEADER, Production
from mwcore.api.signing import MAC_HEADER, Signer
from mwcore.transport.message import Header
from mwcore.transport.topics import MESSAGE_TIMEOUT_MS, producer_config

log = structlog.get_logger("mwcore.transport")

OnDelivery = Callable[[Any, Any], None]  # (error or None, the message: topic(), partition(), offset())

# What the broker (or the client) refuses a record for, whatever the number of tries:
# sending it again would hold its producer (and the watermarks it reports) for ever.
_FOR_GOOD = {
    KafkaError.MSG_SIZE_TOO_LARGE: "too_large",  # over message.max.bytes
    KafkaError.INVALID_MSG_SIZE: "too_large",
    KafkaError.RECORD_LIST_TOO_LARGE: "too_large",
    KafkaError.INVALID_TIMESTAMP: "bad_timestamp",  # past log.message.timestamp.*.max.ms
    KafkaError.INVALID_RECORD: "invalid_record",
}


def refused_for_good(err: Any) -> str | None:
    """The reason a delivery error (a ``KafkaError``, or the ``KafkaException`` that
    carries one) will come again for the same record, or None if a retry may succeed."""
    if isinstance(err, KafkaException) and err.args:
        err = err.args[0]
    code = err.code() if isinstance(err, KafkaError) else None
    return _FOR_GOOD.get(code) if code is not None else None


class Refused:
    """A record the client refused outright, as a delivery callback sees a message."""

    __slots__ = ("_headers", "_key", "_timestamp", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[tuple[str, str | bytes | None]],
    ) -> None:
        self._topic, self._key, self._value = topic, key, value
        self._timestamp, self._headers = timestamp, list(headers)

    @classmethod
    def of(cls, p: Production) -> Refused:
        return cls(p.topic, p.key, p.value, p.timestamp, [(ID_HEADER, p.id)])

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)

    def headers(self) -> list[tuple[str, str | bytes | None]]:
        return self._headers


class Tallied(Protocol):
    """What receives a batch's reports: one at a time (the reference calls it with each
    production's error and message), or all at once (the native core's ``settle_all``):
    ``runtime.outbox.OutboxBatch``."""

    def __call__(self, err: Any, msg: Any) -> None: ...

    def settle_all(
        self,
        failures: list[tuple[Any, str, bytes | None, bytes | None]],
        ends: dict[tuple[str, int], int],
        counts: dict[tuple[str, int], int],
    ) -> None: ...


class ProductionSender(Protocol):
    """What sends a worker's productions: ``Sender`` (the reference), or the native core's
    (``mwcore.cores.native.sender``), with the same methods, arguments and results."""

    def send_all(
        self,
        productions: list[Production],
        on_delivery: Tallied,
        id_header: str,
        *extra: Header,
        sign: Signer | None = None,
    ) -> int: ...
    def send_alone(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        *,
        timestamp: int,
        headers: Sequence[tuple[str, str | bytes | None]],
        timeout: float = ...,
    ) -> tuple[Any, Any]: ...
    def poll(self, timeout: float = 0.0) -> int: ...
    def flush(self, timeout: float) -> int: ...
    def purge(self) -> int: ...


def delivery_error(code: int) -> KafkaError:
    """A delivery report's error from librdkafka's code, as confluent-kafka gives it."""
    return KafkaError(code)


def timed_out() -> KafkaException:
    """What ``send_alone`` returns when the broker's answer did not come in time."""
    return KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT))


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
        tombstone). A record the client refuses outright for good (too large) goes to
        ``on_delivery`` as failed; anything else it refuses raises."""
        while True:
            try:
                self._p.produce(
                    topic, value, key, timestamp=timestamp, headers=list(headers), on_delivery=on_delivery
                )
                return
            except BufferError:
                self._p.poll(0.05)
            except KafkaException as exc:
                if on_delivery is None or refused_for_good(exc) is None:
                    raise
                log.error("produce_refused", topic=topic, error=str(exc))
                on_delivery(exc, Refused(topic, key, value, timestamp, headers))
                return

    def send_all(
        self,
        productions: Iterable[Production],
        on_delivery: OnDelivery,
        id_header: str,
        *extra: Header,
        sign: Signer | None = None,
    ) -> int:
        """Queue productions, each with its id in ``id_header`` (and, with ``sign``, the
        id's MAC in ``MAC_HEADER``), then ``extra`` headers and its own; the number queued."""
        produce = self._p.produce
        n = 0
        for p in productions:
            headers = production_headers(p, id_header, extra, sign)
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
                    on_delivery(exc, Refused.of(p))
                    break
            n += 1
        return n

    def send_alone(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        *,
        timestamp: int,
        headers: Sequence[tuple[str, str | bytes | None]],
        timeout: float = MESSAGE_TIMEOUT_MS / 1000 + 5,  # past librdkafka giving up
    ) -> tuple[Any, Any]:
        """Send one record in a request of its own (everything queued before it is
        delivered first, its reports served) and wait for the broker's answer: the
        delivery error (None when it was written) and the reported message."""
        self._p.flush(timeout)
        result: list[tuple[Any, Any]] = []
        try:
            self._p.produce(
                topic,
                value,
                key,
                timestamp=timestamp,
                headers=list(headers),
                on_delivery=lambda err, msg: result.append((err, msg)),
            )
        except KafkaException as exc:  # refused outright
            return exc, Refused(topic, key, value, timestamp, headers)
        self._p.flush(timeout)
        if not result:
            return timed_out(), None
        return result[0]

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports (waiting up to ``timeout`` for one)."""
        return int(self._p.poll(timeout))

    def flush(self, timeout: float) -> int:
        """Wait until every queued record is delivered or ``timeout`` passes; how many are left."""
        return int(self._p.flush(timeout))

    def purge(self) -> int:
        """Stop sending what is queued or awaiting the broker's answer: each such record
        is reported failed (``_PURGE_QUEUE``, ``_PURGE_INFLIGHT``) and never retried; a
        request already sent may still be written. How many reports were served."""
        self._p.purge(in_queue=True, in_flight=True, blocking=True)
        return int(self._p.poll(0))


def production_headers(
    p: Production, id_header: str, extra: Sequence[Header], sign: Signer | None
) -> list[tuple[str, str | bytes | None]]:
    """A production's headers as sent: its id, ``extra``, its MAC (with ``sign``, a signer
    with the pipeline secret), then its own."""
    headers: list[tuple[str, str | bytes | None]] = [(id_header, p.id), *extra]
    if sign is not None:
        headers.append((MAC_HEADER, sign.sign_production(p)))
    if p.headers:
        headers += p.headers
    return headers
