"""A reader outside the kit: a plain confluent-kafka consumer, ``read_committed`` (what a
Kafka Connect sink, ksqlDB or Flink reads with), that knows nothing of the kit's ids
and so counts a re-sent production as often as it sees it."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from mwcore.api.record import ID_HEADER
from mwcore.transport.topics import partition_counts


@dataclass(frozen=True)
class Seen:
    records: int  # every record read
    ids: Counter[bytes]  # how often each production id was read
    where: dict[bytes, list[tuple[int, int, str]]]  # a repeated id: (partition, offset, sender) of each copy

    @property
    def duplicates(self) -> int:
        """Records beyond the first of their id: what such a reader sees twice."""
        return sum(n - 1 for n in self.ids.values() if n > 1)


def read_committed(bootstrap: str, topic: str, timeout: float = 60.0, **properties: str) -> Seen:
    """Every committed record of ``topic``, from the start to its end (``properties``:
    the client's own, such as its security)."""
    n = partition_counts(bootstrap, [topic]).get(topic, 0)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"outside-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            **properties,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(n)])
    ids: Counter[bytes] = Counter()
    copies: dict[bytes, list[tuple[int, int, str]]] = {}
    records = 0
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(eof) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}: no end on partitions {set(range(n)) - eof}")
            for m in c.consume(10_000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == err._PARTITION_EOF:
                        eof.add(m.partition() or 0)
                    continue
                eof.discard(m.partition() or 0)
                records += 1
                headers = dict(m.headers() or [])
                rid = headers.get(ID_HEADER)
                if isinstance(rid, bytes):
                    ids[rid] += 1
                    sender = headers.get("mw-sender") or b""
                    copy = (m.partition() or 0, m.offset() or 0, bytes(sender).decode(errors="replace"))
                    copies.setdefault(rid, []).append(copy)
    finally:
        c.close()
    return Seen(records, ids, {k: v for k, v in copies.items() if len(v) > 1})
