"""Reading whole topics back (to the end as it is now) for verification."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from mwcore.transport.topics import consumer_config, partition_counts


@dataclass(frozen=True)
class Msg:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int
    headers: dict[str, bytes]

    @property
    def id(self) -> bytes:
        return self.headers["mw-id"]


def read_topic(bootstrap: str, topic: str, timeout: float = 60) -> list[Msg]:
    """Every message of ``topic`` from the start to its end (read until EOF everywhere)."""
    import time

    n = partition_counts(bootstrap, [topic]).get(topic)
    if n is None:
        return []
    c = Consumer(consumer_config(bootstrap, f"reader-{uuid.uuid4().hex}", **{"enable.partition.eof": True}))
    c.assign([TopicPartition(topic, p, 0) for p in range(n)])
    out: list[Msg] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(eof) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}: no EOF on partitions {set(range(n)) - eof}")
            for m in c.consume(10_000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == err._PARTITION_EOF:
                        eof.add(m.partition())
                    continue
                eof.discard(m.partition())
                _, ts = m.timestamp()
                out.append(
                    Msg(
                        topic,
                        m.partition(),
                        m.offset(),
                        m.key(),
                        m.value() or b"",
                        ts,
                        dict(m.headers() or []),
                    )
                )
    finally:
        c.close()
    return out


def consumed(bootstrap: str, namespace: str, computation: str, stream: str) -> bool:
    """A computation's committed positions (written to its group with each checkpoint's
    witness) have reached the end of one of its input streams."""
    from mwcore.transport.topics import end_offsets, topic_name

    topic = topic_name(namespace, stream)
    n = partition_counts(bootstrap, [topic])[topic]
    ends = end_offsets(bootstrap, {topic: n})
    c = Consumer(consumer_config(bootstrap, topic_name(namespace, f"mw.{computation}")))
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(n)], timeout=10)
    finally:
        c.close()
    return all(tp.offset >= ends[(topic, tp.partition)] for tp in got)
