"""Sending the worker's productions on the native core.

The same service as ``producer.Sender`` for the worker (``send_all``, ``send_alone``,
``poll``, ``flush``), on the native core's librdkafka producer: a batch crosses into
Rust once, and its delivery reports come back once, tallied (``OutboxBatch.settle_all``),
instead of one Python callback per production. A delivery error is a confluent-kafka
``KafkaError`` with librdkafka's code (``delivery_error``), so ``refused_for_good`` reads it as it reads the
reference's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mwcore.api.record import Production
from mwcore.api.signing import MAC_HEADER, Signer
from mwcore.cores.native import rust
from mwcore.errors import ConfigError
from mwcore.transport.message import Header
from mwcore.transport.producer import Tallied, delivery_error, timed_out
from mwcore.transport.topics import MESSAGE_TIMEOUT_MS, producer_config

ALONE = 2**63  # the batch number of a record sent alone


def _setting(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class NativeSender:
    def __init__(self, bootstrap: str, **overrides: Any) -> None:
        conf = {k: _setting(v) for k, v in producer_config(bootstrap, **overrides).items()}
        try:
            self._p = rust.Producer(conf)
        except ValueError as exc:
            raise ConfigError(
                f"MW_CORE=native: the native core's producer refuses its settings ({exc}); "
                "fix them, or set MW_CORE=python"
            ) from None
        self._batches: dict[int, Tallied] = {}
        self._next = 0
        self._alone: list[tuple[Any, Any]] = []

    def send_all(
        self,
        productions: list[Production],
        on_delivery: Tallied,
        id_header: str,
        *extra: Header,
        sign: Signer | None = None,
    ) -> int:
        """Queue a batch (as ``Sender.send_all``); ``on_delivery.settle_all`` gets its
        reports once all have come (at a later ``poll`` or ``flush``)."""
        if not productions:
            return 0
        self._next += 1
        self._batches[self._next] = on_delivery
        # each MAC made in Rust (api/signing.rs: the reference's, held to it by test_native_sender)
        key = sign.mac_key if sign is not None else None
        v1 = sign is not None and sign.mac_v1 == "write"
        return int(self._p.send_all(self._next, productions, id_header, extra, MAC_HEADER, key, v1))

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
        """One record in a request of its own (as ``Sender.send_alone``): its delivery
        error (None when it was written), and None for the message."""
        self.flush(timeout)
        own = tuple((k, v) for k, v in headers)
        record = Production(b"", topic, key, value, timestamp, own)  # type: ignore[arg-type]
        self._p.send_all(ALONE, [record], None, (), MAC_HEADER, None, False)
        self.flush(timeout)
        if not self._alone:
            return timed_out(), None
        return self._alone.pop()

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports (waiting up to ``timeout`` for one); batches settled."""
        return self._dispatch(self._p.poll(timeout))

    def flush(self, timeout: float) -> int:
        """Wait until every queued record is reported or ``timeout`` passes; how many are left."""
        left, settled = self._p.flush(timeout)
        self._dispatch(settled)
        return int(left)

    def purge(self) -> int:
        """Stop sending what is queued or awaiting the broker's answer (as
        ``Sender.purge``); how many batches were settled."""
        return self._dispatch(self._p.purge())

    def _dispatch(self, settled: list[Any]) -> int:
        for batch, ends, counts, failures in settled:
            errors = [(delivery_error(code), topic, key, value) for code, topic, key, value in failures]
            if batch == ALONE:
                self._alone = [(errors[0][0] if errors else None, None)]
                continue
            self._batches.pop(batch).settle_all(errors, ends, counts)
        return len(settled)
