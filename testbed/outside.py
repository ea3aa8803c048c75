"""A reader outside the kit: a plain confluent-kafka consumer, ``read_committed`` (what a
Kafka Connect sink, ksqlDB or Flink reads with), that knows nothing of the kit's ids
and so counts a re-sent production as often as it sees it."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection

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


class VisibleLatency:
    """How long records of ``topic`` take to become visible to a ``read_committed``
    reader outside the kit: for each record read, the wall clock then minus the record's
    timestamp (a benchmark stamps its inputs when it produces them, and the computation
    keeps that timestamp). Follows the topic in a process of its own (not competing with
    the caller's feed for its interpreter) from ``start`` to ``stop``; only records
    stamped at or after ``since_ms`` count (not a warm-up)."""

    def __init__(self, bootstrap: str, topic: str, since_ms: int = 1) -> None:
        self._args = (bootstrap, topic, since_ms)
        self._conn, child = multiprocessing.Pipe()
        self._proc = multiprocessing.get_context("spawn").Process(
            target=_follow, args=(*self._args, child), name="visible-latency", daemon=True
        )
        self._count = 0

    def start(self) -> VisibleLatency:
        self._proc.start()
        assert self._conn.recv() == "ready"
        return self

    def seen(self) -> int:
        """How many records it has read so far."""
        self._conn.send("count")
        self._count = int(self._conn.recv())
        return self._count

    def stop(self, timeout: float = 30.0) -> list[int]:
        """Stop following; the samples, sorted."""
        self._conn.send("stop")
        samples: list[int] = self._conn.recv() if self._conn.poll(timeout) else []
        self._proc.join(timeout)
        return sorted(samples)


def _follow(bootstrap: str, topic: str, since_ms: int, conn: Connection) -> None:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"visible-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5,
            "enable.partition.eof": True,
        }
    )
    n = partition_counts(bootstrap, [topic]).get(topic, 0)
    c.assign([TopicPartition(topic, p, 0) for p in range(n)])
    samples: list[int] = []
    eof: set[int] = set()
    while len(eof) < n:  # ready once it has fetched each partition to its end (not before)
        for m in c.consume(100, 0.1):
            if m.error() is not None:
                eof.add(m.partition() or 0)
    conn.send("ready")
    try:
        while True:
            if conn.poll():
                what = conn.recv()
                if what == "stop":
                    conn.send(samples)
                    return
                conn.send(len(samples))
            # a short wait: consume returns once it has this many or the time is up
            for m in c.consume(100, 0.005):
                if m.error() is not None:
                    continue
                now = time.time_ns() // 1_000_000
                ts = m.timestamp()[1]
                if ts >= since_ms:
                    samples.append(now - ts)
    finally:
        c.close()
