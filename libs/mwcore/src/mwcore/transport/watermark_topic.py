"""The watermark topic: the authority publishes each computation's watermarks on a
compacted topic (key = computation, value ``watermarks.published.Watermarks``);
workers, injectors and ``mw watermarks`` follow it. A follower keeps the highest value
it has seen for each field, so a reader never sees a watermark go back even if it
reads an older copy after a newer one. A record without a value (a tombstone) removes
a retired computation.
"""

from __future__ import annotations

import os
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from mwcore.api.clock import MIN_WATERMARK
from mwcore.transport.producer import Sender
from mwcore.transport.topics import consumer_config, ensure_topics, topic_name
from mwcore.watermarks.published import Watermarks

WATERMARK_STREAM = "mw.watermarks"
COMPACTED = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1", "segment.ms": "600000"}


def watermark_topic(namespace: str) -> str:
    return topic_name(namespace, WATERMARK_STREAM)


def ensure_watermark_topic(bootstrap: str, namespace: str) -> str:
    topic = watermark_topic(namespace)
    ensure_topics(bootstrap, {topic: 1}, config=COMPACTED)
    return topic


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


class WatermarkPublisher:
    """The authority's side of the topic: what is on it already, and publishing."""

    def __init__(self, bootstrap: str, namespace: str) -> None:
        self.bootstrap = bootstrap
        self.namespace = namespace
        self.topic = ensure_watermark_topic(bootstrap, namespace)
        self._sender = Sender(bootstrap, **{"linger.ms": 0})

    def read_all(self) -> dict[str, Watermarks]:
        """Every computation's latest watermarks on the topic, read to its end."""
        feed = WatermarkFeed(self.bootstrap, self.namespace)
        try:
            feed.read_to_end()
            return dict(feed.latest)
        finally:
            feed.close()

    def publish(self, wm: Watermarks) -> None:
        self._sender.send(self.topic, wm.encode(), wm.name.encode())

    def tombstone(self, name: str) -> None:
        """Delete a computation's watermarks (followers forget it)."""
        self._sender.send(self.topic, None, name.encode())

    def poll(self) -> None:
        self._sender.poll(0)

    def flush(self, timeout: float = 5.0) -> None:
        self._sender.flush(timeout)
