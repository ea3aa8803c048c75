"""Archived streams: plan a read of ranges of topics, and read one slice of it.

The archive is Kafka itself (topics with long retention). A read is planned once, on
the driver: for every partition of every stream, the offsets to start and stop at,
the stop being the end of the data as it was when the read was planned (so a job
reads a fixed snapshot while producers go on). Large partitions are split into
slices of at most ``split`` offsets; each slice is read on its own (one Spark task).

Time ranges (``from_ms`` <= timestamp < ``to_ms``) are exact: the start offset is the
broker's answer to ``offsets_for_times`` (the first offset whose record is at or after
``from_ms``; Kafka's time index keeps the largest timestamp so far, so no earlier
record is at or after it even when timestamps are out of order), and every record
read is filtered by its timestamp, since later records in a partition may be older.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_END, Consumer, KafkaError, Message, TopicPartition

from mwcore.errors import ConfigError
from mwcore.transport.topics import consumer_config, end_offsets, partition_counts, topic_name

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


def _start_for_time(bootstrap: str, topic: str, partition: int, from_ms: int, low: int, end: int) -> int:
    """The first offset that can hold a record at or after ``from_ms``."""
    c = _consumer(bootstrap)
    try:
        (tp,) = c.offsets_for_times([TopicPartition(topic, partition, from_ms)], timeout=10)
    finally:
        c.close()
    if tp.error is not None:
        raise RuntimeError(f"offsets_for_times on {topic}[{partition}]: {tp.error}")
    if tp.offset == OFFSET_END or tp.offset >= end:  # no record at or after from_ms
        return end
    return max(tp.offset, low)


def bounds(
    bootstrap: str, streams: list[str], what: Range = Range(), namespace: str = "default"
) -> list[Slice]:
    """One slice per partition of every stream (empty where nothing is in range), the
    end of each fixed as of now."""
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
            out.append(Slice(stream, topic, p, min(start, end), end))
    return out


def plan(
    bootstrap: str,
    streams: list[str],
    what: Range = Range(),
    namespace: str = "default",
    split: int = 1_000_000,
) -> list[Slice]:
    """The slices to read (none empty), the end of each partition fixed as of now."""
    out = []
    for whole in bounds(bootstrap, streams, what, namespace):
        for lo in range(whole.start, whole.end, max(1, split)):
            out.append(Slice(whole.stream, whole.topic, whole.partition, lo, min(whole.end, lo + split)))
    return out


def read_slice(bootstrap: str, piece: Slice, timeout_s: float = 60.0) -> Iterator[Message]:
    """Every message of the slice, in offset order (offsets missing after compaction are
    skipped); stops at the slice's end or the partition's end (partition EOF: where
    compaction removed the slice's last records, no offset reaches its end)."""
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


def read_slices(
    bootstrap: str,
    pieces: list[Slice],
    on_message: Callable[[Slice, object], None],
    on_end: Callable[[Slice], None] | None = None,
    timeout_s: float = 60.0,
) -> None:
    """Every message of the slices (one per partition), with one consumer, to
    ``on_message``; ``on_end`` once a slice is through (its end reached, or the partition's, where compaction
    removed the last offsets)."""
    todo = {(p.topic, p.partition): p for p in pieces if p.size > 0}
    if not todo:
        return
    conf = consumer_config(
        bootstrap, f"mw-replay-{time.monotonic_ns()}", None, **{"enable.partition.eof": True}
    )
    c = Consumer(conf)
    c.assign([TopicPartition(p.topic, p.partition, p.start) for p in todo.values()])
    last = time.monotonic()
    try:
        while todo:
            batch = c.consume(10_000, 1.0)
            if not batch and time.monotonic() - last > timeout_s:
                raise TimeoutError(f"no data from {sorted(todo)} for {timeout_s}s")
            for m in batch:
                err = m.error()
                k = (m.topic() or "", m.partition() or 0)
                piece = todo.get(k)
                off = m.offset() or 0
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading the archive: {err}")
                    if piece is not None and off >= piece.start:  # nothing more up to its end
                        del todo[k]
                        if on_end is not None:
                            on_end(piece)
                    continue
                last = time.monotonic()
                if piece is None:
                    continue
                if off >= piece.end:  # the slice's last offsets are gone (compaction): it is through
                    del todo[k]
                    c.pause([TopicPartition(k[0], k[1])])
                    if on_end is not None:
                        on_end(piece)
                    continue
                on_message(piece, m)
                if off + 1 >= piece.end:
                    del todo[k]
                    c.pause([TopicPartition(k[0], k[1])])
                    if on_end is not None:
                        on_end(piece)
    finally:
        c.close()
