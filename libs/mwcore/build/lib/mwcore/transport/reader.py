"""Reading chosen partitions of topics from chosen offsets, outside any consumer group
(``mw tail``, tools and tests): nothing is committed, nothing is rebalanced."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition

from mwcore.transport.message import Message
from mwcore.transport.topics import consumer_config


class PartitionReader:
    def __init__(self, bootstrap: str, starts: Mapping[tuple[str, int], int]) -> None:
        """``starts``: (topic, partition) -> the offset to read it from."""
        self._c = Consumer(consumer_config(bootstrap, f"mw-reader-{time.monotonic_ns()}"))
        self._c.assign([TopicPartition(topic, p, off) for (topic, p), off in starts.items()])

    def poll(self, max_messages: int = 1000, timeout: float = 0.2) -> list[Message]:
        """What has arrived (waiting up to ``timeout``); errors are left out (the client
        retries on its own)."""
        return [m for m in self._c.consume(max_messages, timeout) if m.error() is None]

    def close(self) -> None:
        self._c.close()
