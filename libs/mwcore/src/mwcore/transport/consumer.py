"""A worker's membership of its consumer group, on confluent-kafka, in the runtime's terms.

The group assigns partitions; the runtime decides where each starts (its checkpoint's
position, never the group's committed offset: semantics I-2) and what a revocation
drains. Committed offsets carry the commit witness in their metadata
(``runtime/witness.py``); this module only moves them. Messages come back as the
client's own objects (``transport.message.Message`` names what the runtime reads), so
the per-record path costs nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

import structlog
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from mwcore.errors import ConfigError
from mwcore.transport.message import Message
from mwcore.transport.topics import consumer_config
from mwcore.transport.transient import through_transient

log = structlog.get_logger("mwcore.transport")

BEGINNING = OFFSET_BEGINNING  # a start offset: the partition's first record


class Part(NamedTuple):
    topic: str
    partition: int


class Offset(NamedTuple):
    """A committed (or to be committed) position, with its metadata."""

    topic: str
    partition: int
    offset: int
    metadata: str | None = None


OnAssign = Callable[[list[Part]], dict[Part, int]]  # the start offset of each assigned part
OnRevoke = Callable[[list[Part]], None]
OnCommitted = Callable[[list[Offset]], None]  # what a commit wrote (failed parts left out)


class Member(Protocol):
    """A worker's member of its consumer group: ``GroupConsumer`` (the reference), or the
    native core's (``mwcore.cores.native.consumer``), with the same methods, arguments
    and results. Rebalances call the callbacks given to ``subscribe`` from ``poll``."""

    session_timeout_ms: int

    def subscribe(
        self, topics: Sequence[str], on_assign: OnAssign, on_revoke: OnRevoke, on_lost: OnRevoke
    ) -> None: ...
    def assignment(self) -> list[Part]: ...
    def poll(self, max_messages: int, timeout: float) -> list[Message]: ...
    def pause(self, parts: Iterable[Part]) -> None: ...
    def resume(self, parts: Iterable[Part]) -> None: ...
    def seek(self, part: Part, offset: int) -> None: ...
    def end_offset(self, part: Part, cached: bool = False, timeout: float = 30.0) -> int: ...
    def position(self, part: Part) -> int: ...
    def committed(self, parts: Iterable[Part], timeout: float = 10.0) -> list[Offset]: ...
    def commit(self, offsets: Sequence[Offset], asynchronous: bool = True) -> bool: ...
    def group_metadata(self) -> bytes: ...
    def close(self) -> None: ...


def kafka_exception(code: int, text: str) -> KafkaException:
    """A librdkafka error (its code and text) as confluent-kafka raises it, so that
    ``through_transient`` and the callers read the native core's errors as the
    reference's."""
    return KafkaException(KafkaError(code, text))


INVALID_SESSION_TIMEOUT: int = KafkaError.INVALID_SESSION_TIMEOUT


def _part(tp: TopicPartition) -> Part:
    return Part(tp.topic, tp.partition)


def _tps(parts: Iterable[Part]) -> list[TopicPartition]:
    return [TopicPartition(p.topic, p.partition) for p in parts]


def member_config(
    bootstrap: str, group: str, instance_id: str | None, session_timeout_ms: int
) -> dict[str, Any]:
    """librdkafka's settings of a worker's group member (either core's)."""
    return consumer_config(
        bootstrap,
        group,
        instance_id,
        **{
            "session.timeout.ms": session_timeout_ms,
            # a member learns of a rebalance at its next heartbeat: a tenth of the
            # session keeps hand-overs short (0.35 s of 0.8 s at a quarter, here)
            "heartbeat.interval.ms": max(100, session_timeout_ms // 10),
        },
    )


def session_refused(session_timeout_ms: int) -> ConfigError:
    """The broker refuses the session timeout: what to change."""
    return ConfigError(
        f"the broker refuses MW_SESSION_TIMEOUT_MS={session_timeout_ms}: its "
        "group.min.session.timeout.ms is higher (6000 by Kafka's default); lower that "
        "on the broker, or raise MW_SESSION_TIMEOUT_MS to at least it"
    )


class GroupConsumer:
    def __init__(
        self,
        bootstrap: str,
        group: str,
        instance_id: str | None = None,
        session_timeout_ms: int = 1500,
        on_committed: OnCommitted | None = None,
    ) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.group = group
        self._on_committed = on_committed
        self._closing = False  # a closing member takes no new partitions
        conf = {
            **member_config(bootstrap, group, instance_id, session_timeout_ms),
            "on_commit": self._committed_cb,
        }
        self._c = Consumer(conf)

    # -- membership ------------------------------------------------------------------------

    def subscribe(
        self, topics: Sequence[str], on_assign: OnAssign, on_revoke: OnRevoke, on_lost: OnRevoke
    ) -> None:
        def assigned(consumer: Consumer, tps: list[TopicPartition]) -> None:
            if self._closing:  # an assignment that waited in the queue: not taken
                consumer.unassign()
                return
            starts = on_assign([_part(tp) for tp in tps])
            for tp in tps:
                tp.offset = starts[_part(tp)]
            consumer.assign(tps)
            # A partition paused when its interval was fenced stays paused in librdkafka
            # across a revoke and a new assignment (found by bench/chaos.py: a rebalance
            # between the fence and the retake left two intervals owned and never fetched).
            consumer.resume(tps)

        def revoked(consumer: Consumer, tps: list[TopicPartition]) -> None:
            on_revoke([_part(tp) for tp in tps])
            consumer.unassign()

        def lost(consumer: Consumer, tps: list[TopicPartition]) -> None:
            on_lost([_part(tp) for tp in tps])

        self._c.subscribe(list(topics), on_assign=assigned, on_revoke=revoked, on_lost=lost)

    def assignment(self) -> list[Part]:
        return [_part(tp) for tp in self._c.assignment()]

    # -- reading ---------------------------------------------------------------------------

    def poll(self, max_messages: int, timeout: float) -> list[Message]:
        """What has arrived, at once; if nothing has, wait up to ``timeout`` for a first
        message, then take what came with it. (``consume`` with a timeout waits for a
        full chunk, and so held every record back.) Errors are handled here: a setting
        the broker refuses stops the worker (``ConfigError``); anything else is logged
        (librdkafka retries on its own)."""
        c = self._c
        messages: list[Any] = c.consume(max_messages, 0)
        if not messages:
            first = c.poll(timeout)
            if first is not None:
                messages = [first, *c.consume(max_messages - 1, 0)]
        if any(m.error() is not None for m in messages):
            messages = [m for m in messages if not self._error(m.error())]
        return messages

    def _error(self, err: KafkaError | None) -> bool:
        if err is None:
            return False
        if err.code() == KafkaError.INVALID_SESSION_TIMEOUT:
            raise session_refused(self.session_timeout_ms)
        log.warning("consumer_error", group=self.group, error=err.str(), code=err.name())
        return True

    def pause(self, parts: Iterable[Part]) -> None:
        self._c.pause(_tps(parts))

    def resume(self, parts: Iterable[Part]) -> None:
        self._c.resume(_tps(parts))

    def seek(self, part: Part, offset: int) -> None:
        self._c.seek(TopicPartition(part.topic, part.partition, offset))

    def end_offset(self, part: Part, cached: bool = False, timeout: float = 30.0) -> int:
        """The partition's end (high watermark): as last fetched (``cached``), or asked now
        (waiting up to ``timeout``)."""
        tp = TopicPartition(part.topic, part.partition)
        if cached:
            _, high = self._c.get_watermark_offsets(tp, cached=True)
        else:  # a leader moving (a broker died) is asked again, within the timeout
            _, high = through_transient(
                lambda left: self._c.get_watermark_offsets(tp, timeout=left, cached=False), timeout
            )
        return int(high)

    def position(self, part: Part) -> int:
        """The next offset this consumer will read from the partition (negative: none yet)."""
        return int(self._c.position([TopicPartition(part.topic, part.partition)])[0].offset)

    # -- committed offsets -----------------------------------------------------------------

    def committed(self, parts: Iterable[Part], timeout: float = 10.0) -> list[Offset]:
        got = self._c.committed(_tps(parts), timeout=timeout)
        return [Offset(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in got]

    def group_metadata(self) -> bytes:
        """This member's group, generation and member id, as a transactional producer's
        ``send_offsets_to_transaction`` takes them (librdkafka's serialized form)."""
        return bytes(self._c.consumer_group_metadata())

    def commit(self, offsets: Sequence[Offset], asynchronous: bool = True) -> bool:
        """Commit ``offsets``; ``on_committed`` gets what was written (at a later poll,
        when asynchronous: once per commit, also when it failed). False if the commit
        could not be made: a member out of the group cannot commit (logged, not raised:
        the caller tries again)."""
        tps = [TopicPartition(o.topic, o.partition, o.offset, metadata=o.metadata) for o in offsets]
        try:
            if asynchronous:
                self._c.commit(offsets=tps, asynchronous=True)
            else:
                self._committed_cb(None, self._c.commit(offsets=tps, asynchronous=False) or [])
        except KafkaException as exc:
            log.warning("offset_commit_failed", group=self.group, error=str(exc))
            return False
        return True

    def _committed_cb(self, err: Any, tps: list[TopicPartition]) -> None:
        if err is not None:
            log.warning("offset_commit_failed", group=self.group, error=str(err))
        if self._on_committed is not None:
            ok = [Offset(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in tps if tp.error is None]
            self._on_committed(ok)

    def close(self) -> None:
        """Leave the group: revocations are served, and an assignment still waiting in
        the queue is not taken (``on_assign`` acquires intervals: never while closing)."""
        self._closing = True
        self._c.close()
