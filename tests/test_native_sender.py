"""The native core's sender (``transport/native_producer.py``, ``producer.rs``) on a real
broker: a poll hands over every batch whose reports are already in, and a flush every
batch, with each partition's end and count.

librdkafka reports deliveries as events, one per partition's share of a produce
response; rdkafka's ``poll`` serves one event a call, so a batch across partitions
waited for a poll per partition (and its acknowledged productions stayed in the
checkpoint that long)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mwcore.api.record import ID_HEADER, Production
from mwcore.core import installed
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.native_producer import NativeSender
from mwcore.transport.topics import ensure_topics

pytestmark = pytest.mark.skipif(not installed(), reason="the native core is not installed")

PARTITIONS = 4


class Batch:
    """What an outbox batch is told (``Tallied``)."""

    def __init__(self) -> None:
        self.settled: list[tuple[Any, ...]] = []

    def settle_all(self, failures: list[Any], ends: dict[Any, int], counts: dict[Any, int]) -> None:
        self.settled.append((failures, ends, counts))


def _send(sender: NativeSender, topic: str, n_batches: int, per_batch: int) -> list[Batch]:
    batches = []
    for b in range(n_batches):
        batch = Batch()
        productions = [
            Production(f"{b}-{i}".encode(), topic, f"key-{i}".encode(), b"v", int(time.time() * 1000))
            for i in range(per_batch)
        ]
        sender.send_all(productions, batch, ID_HEADER)
        batches.append(batch)
    return batches


def test_one_poll_hands_over_every_batch_already_acknowledged(stack: LocalStack, namespace: str) -> None:
    topic = f"{namespace}.sender"
    ensure_topics(stack.bootstrap, {topic: PARTITIONS})
    sender = NativeSender(stack.bootstrap)
    warm = _send(sender, topic, 1, 40)  # connected, a producer id, the topic's leaders known
    assert sender.flush(10) == 0 and len(warm[0].settled) == 1
    batches = _send(sender, topic, 5, 40)  # each batch's 40 keys fall on every partition
    time.sleep(2)  # every acknowledgement in (a single broker on this machine: milliseconds)
    settled = sender.poll(0)
    assert settled == 5, f"one poll handed over {settled} of 5 acknowledged batches"
    for batch in batches:
        [(failures, ends, counts)] = batch.settled
        assert failures == []
        assert sum(counts.values()) == 40 and len(counts) == PARTITIONS, counts
    # and a flush: everything handed over, the ends past every record written
    more = _send(sender, topic, 3, 40)
    assert sender.flush(10) == 0
    assert all(len(b.settled) == 1 for b in more)
    ends = more[-1].settled[0][1]
    assert sum(ends.values()) == 9 * 40, ends  # one topic written only here: its ends count it all
