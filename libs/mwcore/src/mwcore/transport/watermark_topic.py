"""The watermark topic: the authority publishes each computation's watermarks on a
compacted topic (key = computation); workers, injectors and ``mw watermarks`` follow it.

Values are small JSON objects::

    {"name": "windower", "kind": "computation", "input": 1700000000000,
     "output": 1700000000000, "input_pct": ..., "output_pct": ..., "at": <wall ms>}

``input`` is the computation's input low watermark (its timers fire on it);
``output`` bounds what it may still produce. ``*_pct`` are the percentile ones.
A follower keeps the highest value it has seen for each field, so a reader never
sees a watermark go back even if it reads an older copy after a newer one. A record
without a value (a tombstone) removes a retired computation.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from mwcore.api.clock import MIN_WATERMARK
from mwcore.transport.topics import consumer_config, ensure_topics, topic_name

WATERMARK_STREAM = "mw.watermarks"
COMPACTED = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1", "segment.ms": "600000"}


def watermark_topic(namespace: str) -> str:
    return topic_name(namespace, WATERMARK_STREAM)


def ensure_watermark_topic(bootstrap: str, namespace: str) -> str:
    topic = watermark_topic(namespace)
    ensure_topics(bootstrap, {topic: 1}, config=COMPACTED)
    return topic


@dataclass(frozen=True)
class Watermarks:
    name: str
    kind: str
    input: int = MIN_WATERMARK
    output: int = MIN_WATERMARK
    input_pct: int = MIN_WATERMARK
    output_pct: int = MIN_WATERMARK
    at: int = 0

    def encode(self) -> bytes:
        return json.dumps(self.__dict__, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Watermarks:
        data: dict[str, Any] = json.loads(raw)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def merged(self, other: Watermarks) -> Watermarks:
        """Field-wise maximum: what a monotonic reader keeps."""
        return replace(
            self,
            input=max(self.input, other.input),
            output=max(self.output, other.output),
            input_pct=max(self.input_pct, other.input_pct),
            output_pct=max(self.output_pct, other.output_pct),
            at=max(self.at, other.at),
        )


class WatermarkFeed:
    """Follows the watermark topic from its beginning (it is compacted, so short)."""

    def __init__(self, bootstrap: str, namespace: str) -> None:
        self.topic = ensure_watermark_topic(bootstrap, namespace)
        group = f"mw-wm-feed-{os.getpid()}-{os.urandom(4).hex()}"
        conf = consumer_config(bootstrap, group, None, **{"enable.partition.eof": True})
        self._consumer = Consumer(conf)
        self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        self.latest: dict[str, Watermarks] = {}
        self.at_end = False  # read up to the end at least once
        self.received = 0

    def poll(self, timeout: float = 0.0) -> bool:
        """Take what has arrived; True if anything changed."""
        changed = False
        for m in self._consumer.consume(1000, timeout):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.at_end = True
                continue
            value = m.value()
            if not value:  # a tombstone: the computation was retired (``mw retire``)
                key = m.key()
                if key and self.latest.pop(key.decode(), None) is not None:
                    changed = True
                continue
            wm = Watermarks.decode(value)
            self.received += 1
            old = self.latest.get(wm.name)
            self.latest[wm.name] = wm if old is None else old.merged(wm)
            changed = True
        return changed

    def read_to_end(self, timeout: float = 30.0) -> None:
        """Read everything published so far; TimeoutError if the end is not reached."""
        deadline = time.monotonic() + timeout
        while not self.at_end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {self.topic} to its end in {timeout}s")
            self.poll(0.1)

    def get(self, name: str) -> Watermarks | None:
        return self.latest.get(name)

    def close(self) -> None:
        self._consumer.close()


class TopicWatermark:
    """A ``WatermarkSource`` that follows the authority's topic."""

    def __init__(self, feed: WatermarkFeed, refresh_s: float = 0.005) -> None:
        self.feed = feed
        self._refresh = refresh_s
        self._polled = 0.0

    def input_watermark(self, computation: str) -> int:
        now = time.monotonic()
        if now - self._polled >= self._refresh:
            self._polled = now
            self.feed.poll()
        wm = self.feed.get(computation)
        return MIN_WATERMARK if wm is None else wm.input
