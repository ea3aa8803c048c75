"""A worker's membership of its consumer group on the native core.

The same service as ``consumer.GroupConsumer`` (its methods, arguments and results),
on the native core's librdkafka consumer: a poll's messages cross from Rust at once,
as objects with the methods the runtime reads of confluent-kafka's messages, and the
group's rebalances call the same callbacks. A librdkafka error is a confluent-kafka
``KafkaException`` with librdkafka's code, so ``through_transient`` and the callers
read it as they read the reference's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import structlog

from mwcore.cores.native import rust
from mwcore.errors import ConfigError
from mwcore.transport.consumer import (
    INVALID_SESSION_TIMEOUT,
    Offset,
    OnAssign,
    OnCommitted,
    OnRevoke,
    Part,
    kafka_exception,
    member_config,
    session_refused,
)
from mwcore.transport.message import Message
from mwcore.transport.transient import through_transient

log = structlog.get_logger("mwcore.transport")


def _setting(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@contextmanager
def _as_kafka_exception() -> Iterator[None]:
    """The native core's ``KafkaFailure(code, text)`` as confluent-kafka's exception."""
    try:
        yield
    except rust.KafkaFailure as exc:
        code, text = exc.args
        raise kafka_exception(code, text) from None


def _parts(raw: list[tuple[str, int]]) -> list[Part]:
    return [Part(t, p) for t, p in raw]


class NativeGroupConsumer:
    def __init__(
        self,
        bootstrap: str,
        group: str,
        instance_id: str | None = None,
        session_timeout_ms: int = 1500,
        on_committed: OnCommitted | None = None,
        batch_poll: bool = True,
    ) -> None:
        """``batch_poll``: a poll's messages taken from librdkafka in one call, from a
        queue of their own (``transport/fetched.rs``), as a worker's are; off: one call a
        message (the consumer's tests read both ways)."""
        self.session_timeout_ms = session_timeout_ms
        self.group = group
        self._on_committed = on_committed
        conf = member_config(bootstrap, group, instance_id, session_timeout_ms)
        try:
            self._c = rust.GroupConsumer(
                {k: _setting(v) for k, v in conf.items()}, self._committed_cb, batch_poll
            )
        except rust.KafkaFailure as exc:
            raise ConfigError(
                f"MW_CORE=native: the native core's consumer refuses its settings ({exc.args[1]}); "
                "fix them, or set MW_CORE=python"
            ) from None

    # -- membership ------------------------------------------------------------------------

    def subscribe(
        self, topics: Sequence[str], on_assign: OnAssign, on_revoke: OnRevoke, on_lost: OnRevoke
    ) -> None:
        def assigned(raw: list[tuple[str, int]]) -> dict[Part, int]:
            return on_assign(_parts(raw))

        def revoked(raw: list[tuple[str, int]]) -> None:
            on_revoke(_parts(raw))

        def lost(raw: list[tuple[str, int]]) -> None:
            on_lost(_parts(raw))

        with _as_kafka_exception():
            self._c.subscribe(list(topics), assigned, revoked, lost)

    def assignment(self) -> list[Part]:
        with _as_kafka_exception():
            return _parts(self._c.assignment())

    # -- reading ---------------------------------------------------------------------------

    def poll(self, max_messages: int, timeout: float) -> list[Message]:
        """As ``GroupConsumer.poll``: what has arrived, waiting only for a first message."""
        messages, errors = self._c.poll(max_messages, timeout)
        for code, text in errors:
            self._error(code, text)
        return cast(list[Message], messages)  # (``Msg``: the methods a ``Message`` has)

    def _error(self, code: int, text: str) -> None:
        if code == INVALID_SESSION_TIMEOUT:
            raise session_refused(self.session_timeout_ms)
        log.warning("consumer_error", group=self.group, error=text, code=code)

    def pause(self, parts: Iterable[Part]) -> None:
        with _as_kafka_exception():
            self._c.pause([(p.topic, p.partition) for p in parts])

    def resume(self, parts: Iterable[Part]) -> None:
        with _as_kafka_exception():
            self._c.resume([(p.topic, p.partition) for p in parts])

    def seek(self, part: Part, offset: int) -> None:
        with _as_kafka_exception():
            self._c.seek(part.topic, part.partition, offset)

    def end_offset(self, part: Part, cached: bool = False, timeout: float = 30.0) -> int:
        """The partition's end (high watermark): as last fetched (``cached``), or asked now."""
        if cached:
            with _as_kafka_exception():
                return int(self._c.end_offset(part.topic, part.partition, True, 0.0))

        def ask(left: float) -> int:
            with _as_kafka_exception():
                return int(self._c.end_offset(part.topic, part.partition, False, left))

        return through_transient(ask, timeout)

    def position(self, part: Part) -> int:
        with _as_kafka_exception():
            return int(self._c.position(part.topic, part.partition))

    # -- committed offsets -----------------------------------------------------------------

    def committed(self, parts: Iterable[Part], timeout: float = 10.0) -> list[Offset]:
        with _as_kafka_exception():
            got = self._c.committed([(p.topic, p.partition) for p in parts], timeout)
        return [Offset(t, p, o, m) for t, p, o, m in got]

    def group_metadata(self) -> bytes:
        """As ``GroupConsumer.group_metadata`` (the same serialized form)."""
        with _as_kafka_exception():
            return bytes(self._c.group_metadata())

    def commit(self, offsets: Sequence[Offset], asynchronous: bool = True) -> bool:
        """As ``GroupConsumer.commit``: ``on_committed`` gets what an asynchronous commit
        wrote at a later poll, and what a synchronous one wrote at once."""
        try:
            self._c.commit([(o.topic, o.partition, o.offset, o.metadata) for o in offsets], asynchronous)
        except rust.KafkaFailure as exc:
            log.warning("offset_commit_failed", group=self.group, error=str(kafka_exception(*exc.args)))
            return False
        if not asynchronous:  # as the reference: what a synchronous commit wrote, at once
            self._committed_cb(None, [tuple(o) for o in offsets])  # type: ignore[misc]
        return True

    def _committed_cb(self, error: str | None, offsets: list[tuple[str, int, int, str | None]]) -> None:
        if error is not None:
            log.warning("offset_commit_failed", group=self.group, error=error)
        if self._on_committed is not None:
            self._on_committed([Offset(t, p, o, m) for t, p, o, m in offsets])

    def close(self) -> None:
        self._c.close()
