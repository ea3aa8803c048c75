"""Which single-object writer schemas a topic's values name: read to its end, for
``mw schemas import`` (the schemas on ``mw.schemas`` copied into a registry under the
subjects of the topics that use them)."""

from __future__ import annotations

import os
import time
from collections import Counter

from confluent_kafka import Consumer, TopicPartition

from mwcore.errors import SchemaLookupError
from mwcore.serde.framing import frame_of
from mwcore.transport.topics import consumer_config, partition_counts


def writer_fingerprints(
    bootstrap: str, topic: str, limit: int = 1_000_000, timeout: float = 60.0
) -> Counter[int]:
    """How many of the topic's values (at most ``limit``, from the start) name each
    single-object writer fingerprint (``SchemaLookupError``: not read to its end within
    ``timeout`` seconds)."""
    n = partition_counts(bootstrap, [topic]).get(topic)
    found: Counter[int] = Counter()
    if not n:
        return found
    group = f"mw-fingerprints-{os.getpid()}-{os.urandom(4).hex()}"  # never joined: assign only
    config = consumer_config(bootstrap, group)
    config["enable.partition.eof"] = True
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])
    done: set[int] = set()
    seen = 0
    deadline = time.monotonic() + timeout
    try:
        while len(done) < n and seen < limit:
            if time.monotonic() > deadline:
                raise SchemaLookupError(f"could not read {topic} to its end in {timeout}s")
            for m in consumer.consume(10_000, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == err._PARTITION_EOF:
                        done.add(m.partition() or 0)
                    continue
                seen += 1
                frame = frame_of(m.value() or b"")
                if frame is not None and frame.wire == "single-object":
                    found[int(frame.ref)] += 1
    finally:
        consumer.close()
    return found
