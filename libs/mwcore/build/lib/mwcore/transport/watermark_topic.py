"""The watermark topic: the authority publishes each computation's watermarks on a
compacted topic (key = computation, value ``watermarks.published.Watermarks``);
workers, injectors and ``mw watermarks`` follow it. A follower keeps the highest value
it has seen for each field, so a reader never sees a watermark go back even if it
reads an older copy after a newer one. A record without a value (a tombstone) removes
a retired computation.

Anyone who can write the topic can write anything to it: a follower uses only records
``Watermarks.parse`` accepts (its key is its name, its values in range and consistent)
and, with a pipeline secret (``MW_ID_SECRET``), only those the authority signed
(``mw-mac`` header: a MAC of key and value). Others are skipped and counted
(``transport/rejections.py``); with the secured setup, ACLs keep everyone but the
authority from writing the topic at all (docs/security.md).
"""

from __future__ import annotations

import os
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from mwcore.api.clock import MIN_WATERMARK
from mwcore.api.signing import MAC_HEADER, UNSIGNED, Signer
from mwcore.errors import RejectedRecord
from mwcore.transport.producer import Sender
from mwcore.transport.rejections import REJECTED
from mwcore.transport.topics import consumer_config, ensure_topics, topic_name
from mwcore.watermarks.published import Watermarks

_MAC_CONTEXT = b"mw-watermarks"

WATERMARK_STREAM = "mw.watermarks"
COMPACTED = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1", "segment.ms": "600000"}


def watermark_topic(namespace: str) -> str:
    return topic_name(namespace, WATERMARK_STREAM)


def ensure_watermark_topic(bootstrap: str, namespace: str) -> str:
    topic = watermark_topic(namespace)
    ensure_topics(bootstrap, {topic: 1}, config=COMPACTED)
    return topic


def _signed(key: bytes, value: bytes | None) -> bytes:
    return len(key).to_bytes(4, "big") + key + (value or b"")


class WatermarkFeed:
    """Follows the watermark topic from its beginning (it is compacted, so short)."""

    def __init__(self, bootstrap: str, namespace: str, signer: Signer = UNSIGNED) -> None:
        self.signer = signer
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
            try:
                wm = self._accept(m)
            except RejectedRecord as why:
                REJECTED.reject(self.topic, m.partition() or 0, m.offset() or 0, why)
                continue
            if wm is None:  # a tombstone: the computation was retired (``mw retire``)
                if self.latest.pop((m.key() or b"").decode(errors="replace"), None) is not None:
                    changed = True
                continue
            self.received += 1
            old = self.latest.get(wm.name)
            self.latest[wm.name] = wm if old is None else old.merged(wm)
            changed = True
        return changed

    def _accept(self, m: Any) -> Watermarks | None:
        """The record's watermarks (None: a tombstone), or ``RejectedRecord``."""
        key, value = m.key() or b"", m.value()
        if self.signer.enabled:
            mac = next((v for n, v in m.headers() or () if n == MAC_HEADER), None)
            if not self.signer.verify(_MAC_CONTEXT, _signed(key, value), mac):
                raise RejectedRecord("bad_mac", f"key {key!r:.80}")
        return None if not value else Watermarks.parse(key, value)

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

    def __init__(self, bootstrap: str, namespace: str, signer: Signer = UNSIGNED) -> None:
        self.bootstrap = bootstrap
        self.namespace = namespace
        self.signer = signer
        self.topic = ensure_watermark_topic(bootstrap, namespace)
        self._sender = Sender(bootstrap, **{"linger.ms": 0})

    def read_all(self) -> dict[str, Watermarks]:
        """Every computation's latest watermarks on the topic, read to its end (what a
        follower accepts of it)."""
        feed = WatermarkFeed(self.bootstrap, self.namespace, self.signer)
        try:
            feed.read_to_end()
            return dict(feed.latest)
        finally:
            feed.close()

    def publish(self, wm: Watermarks) -> None:
        self._send(wm.name.encode(), wm.encode())

    def tombstone(self, name: str) -> None:
        """Delete a computation's watermarks (followers forget it)."""
        self._send(name.encode(), None)

    def _send(self, key: bytes, value: bytes | None) -> None:
        headers = []
        if self.signer.enabled:
            headers.append((MAC_HEADER, self.signer.mac(_MAC_CONTEXT, _signed(key, value))))
        self._sender.send(self.topic, value, key, headers=headers)

    def poll(self) -> None:
        self._sender.poll(0)

    def flush(self, timeout: float = 5.0) -> None:
        self._sender.flush(timeout)
