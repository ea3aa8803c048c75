"""Archived streams: plan a read of ranges of topics, and read one slice of it.

The archive is Kafka itself (topics with long retention). A read is planned once, on
the driver: for every partition of every stream, the offsets to start and stop at,
the stop being the end of the data as it was when the read was planned (so a job
reads a fixed snapshot while producers go on). Large partitions are split into
slices of at most ``split`` offsets; each slice is read on its own (one Spark task).

Time ranges (``from_ms`` <= timestamp < ``to_ms``) are exact on any broker: the start
offset comes from the broker's time index where the broker has a trustworthy one
(checked: the record just before it must be older than ``from_ms``; the development
broker's index ignores the time and answers the first offset, which is safe but
reads more), and every record read is filtered by its timestamp, since timestamps in
a partition need not be in order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_END, Consumer, KafkaError, Message, TopicPartition

from mwcore.errors import ConfigError
from mwcore.transport import consumer_config, end_offsets, partition_counts, topic_name

EARLIEST, LATEST = -2, -1  # as in Spark's Kafka source's offset JSON


@dataclass(frozen=True)
class Slice:
    """Offsets [start, end) of one partition of one stream."""

    stream: str
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Range:
    """What to read: offsets per stream and partition (EARLIEST/LATEST allowed) and/or
    a time range in ms (from inclusive, to exclusive)."""

    starting: Mapping[str, Mapping[int, int]] | None = None
    ending: Mapping[str, Mapping[int, int]] | None = None
    from_ms: int | None = None
    to_ms: int | None = None

    def keeps(self, timestamp: int) -> bool:
        return (self.from_ms is None or timestamp >= self.from_ms) and (
            self.to_ms is None or timestamp < self.to_ms
        )


def _consumer(bootstrap: str, **extra: object) -> Consumer:
    return Consumer(consumer_config(bootstrap, f"mw-archive-{time.monotonic_ns()}", None, **extra))


def _timestamp_at(c: Consumer, topic: str, partition: int, offset: int, timeout: float = 10.0) -> int | None:
    c.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in c.consume(1, 0.5):
            if m.error() is None:
                return int(m.timestamp()[1])
    return None


def _start_for_time(bootstrap: str, topic: str, partition: int, from_ms: int, low: int, end: int) -> int:
    """The first offset that can hold a record at or after ``from_ms``."""
    c = _consumer(bootstrap)
    try:
        (tp,) = c.offsets_for_times([TopicPartition(topic, partition, from_ms)], timeout=10)
        off = tp.offset
        if tp.error is not None or (off < 0 and off != OFFSET_END):
            return low
        if off == OFFSET_END or off >= end:  # no record at or after from_ms (if the broker is right)
            last = _timestamp_at(c, topic, partition, end - 1) if end > low else None
            return end if last is not None and last < from_ms else low
        if off > low:
            before = _timestamp_at(c, topic, partition, off - 1)
            if before is None or before >= from_ms:  # the broker's index is not to be trusted
                return low
        return max(off, low)
    finally:
        c.close()


def plan(
    bootstrap: str,
    streams: list[str],
    what: Range = Range(),
    namespace: str = "default",
    split: int = 1_000_000,
) -> list[Slice]:
    """The slices to read, the end of each partition fixed as of now."""
    topics = {s: topic_name(namespace, s) for s in streams}
    counts = partition_counts(bootstrap, list(topics.values()))
    missing = sorted(s for s, t in topics.items() if not counts.get(t))
    if missing:
        plural = "s" if len(missing) > 1 else ""
        raise ConfigError(f"no such stream{plural} in namespace {namespace!r}: {', '.join(missing)}")
    ends = end_offsets(bootstrap, {t: counts[t] for t in topics.values()})
    out = []
    for stream, topic in topics.items():
        starting = (what.starting or {}).get(stream, {})
        ending = (what.ending or {}).get(stream, {})
        for p in range(counts[topic]):
            end_now = ends[(topic, p)]
            start = starting.get(p, EARLIEST)
            end = ending.get(p, LATEST)
            start = 0 if start == EARLIEST else end_now if start == LATEST else start
            end = end_now if end == LATEST else min(end, end_now)
            if what.from_ms is not None and start < end:
                start = max(start, _start_for_time(bootstrap, topic, p, what.from_ms, start, end))
            for lo in range(start, end, max(1, split)):
                out.append(Slice(stream, topic, p, lo, min(end, lo + split)))
    return out


def read_slice(bootstrap: str, piece: Slice, timeout_s: float = 60.0) -> Iterator[Message]:
    """Every message of the slice, in offset order (offsets missing after compaction are
    skipped); stops at the slice's end or the partition's end."""
    if piece.size <= 0:
        return
    c = _consumer(bootstrap, **{"enable.partition.eof": True, "fetch.max.bytes": 52_428_800})
    c.assign([TopicPartition(piece.topic, piece.partition, piece.start)])
    last_progress = time.monotonic()
    try:
        while True:
            batch = c.consume(10_000, 1.0)
            if not batch:
                if time.monotonic() - last_progress > timeout_s:
                    raise TimeoutError(f"no data from {piece.topic}[{piece.partition}] for {timeout_s}s")
                continue
            last_progress = time.monotonic()
            for m in batch:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    raise RuntimeError(f"reading {piece.topic}[{piece.partition}]: {err}")
                off = m.offset() or 0
                if off >= piece.end:
                    return
                yield m
                if off + 1 >= piece.end:
                    return
    finally:
        c.close()
