"""The native core's sender (``cores/native/sender.py``, ``transport/producer.rs``) on a real
broker: a flush hands over every batch, each with its partitions' ends and counts, and
polls hand over the batches acknowledged meanwhile.

Its flush serves delivery reports every millisecond (rdkafka's own served them in
spans of 100 ms, so every hand-over waited 100 ms for acknowledgements that were in
within one or two: CHANGELOG.md, measured history, "Takeovers and the drain")."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError

from mwcore.api.ids import random_id
from mwcore.api.record import ID_HEADER, Production
from mwcore.api.signing import MAC_HEADER, Signer
from mwcore.cores.native.sender import NativeSender
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics
from testbed.native import requires_native
from testbed.topics import read_topic

pytestmark = requires_native

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


def test_a_flush_hands_over_every_batch_and_polls_those_acknowledged(
    stack: LocalStack, namespace: str
) -> None:
    topic = f"{namespace}.sender"
    ensure_topics(stack.bootstrap, {topic: PARTITIONS})
    sender = NativeSender(stack.bootstrap)
    warm = _send(sender, topic, 1, 40)  # connected, a producer id, the topic's leaders known
    assert sender.flush(10) == 0 and len(warm[0].settled) == 1
    batches = _send(sender, topic, 5, 40)  # each batch's 40 keys fall on every partition
    deadline = time.monotonic() + 10
    while not all(b.settled for b in batches) and time.monotonic() < deadline:
        sender.poll(0)
        time.sleep(0.01)
    for batch in batches:
        [(failures, ends, counts)] = batch.settled  # once each
        assert failures == []
        assert sum(counts.values()) == 40 and len(counts) == PARTITIONS, counts
    more = _send(sender, topic, 3, 40)
    assert sender.flush(10) == 0
    assert all(len(b.settled) == 1 for b in more)
    ends = more[-1].settled[0][1]
    assert sum(ends.values()) == 9 * 40, ends  # one topic written only here: its ends count it all


def test_a_production_to_a_topic_librdkafka_refuses_fails_alone_in_its_batch(
    stack: LocalStack, namespace: str
) -> None:
    """A topic name librdkafka takes no handle for (here one with a NUL) fails that
    production, with librdkafka's invalid-argument code, as librdkafka would refuse it
    by name; the batch's others are sent, and the batch settles once."""
    topic = f"{namespace}.sender"
    ensure_topics(stack.bootstrap, {topic: PARTITIONS})
    sender = NativeSender(stack.bootstrap)
    now = int(time.time() * 1000)
    batch = Batch()
    productions = [
        Production(b"ok-0", topic, b"k0", b"v", now),
        Production(b"bad", "bad\x00topic", b"k1", b"v1", now),
        Production(b"ok-1", topic, b"k2", b"v", now),
    ]
    sender.send_all(productions, batch, ID_HEADER)
    assert sender.flush(10) == 0
    [(failures, _ends, counts)] = batch.settled
    assert sum(counts.values()) == 2, counts
    [(error, failed_topic, key, value)] = failures
    assert error.code() == KafkaError._INVALID_ARG
    assert (failed_topic, key, value) == ("bad\x00topic", b"k1", b"v1")


def test_the_native_senders_macs_are_the_references(stack: LocalStack, namespace: str) -> None:
    """Each production's MAC, made in Rust (``api/signing.rs``), is the one the reference
    makes (``Signer.sign_production``): version 2 over id, topic, key and body, in either
    framing and without one; version 1 where the signer writes it."""
    topic = f"{namespace}.signed"
    ensure_topics(stack.bootstrap, {topic: 1})
    now = int(time.time() * 1000)
    values = [b"\x00\x00\x00\x00\x07\x02", b"\xc3\x01" + bytes(8) + b"\x04", b"raw", b""]
    keys: list[bytes | None] = [b"k", None, b"", b"\xff" * 40]
    productions = [Production(random_id(), topic, keys[i % 4], values[i % 4], now) for i in range(16)]
    expected: dict[bytes, bytes] = {}
    for mode in ("off", "write"):
        signer = Signer("the native sender's pipeline secret", mode)  # type: ignore[arg-type]
        batch = productions[:8] if mode == "off" else productions[8:]
        sender = NativeSender(stack.bootstrap)
        sender.send_all(batch, Batch(), ID_HEADER, sign=signer)
        assert sender.flush(10) == 0
        expected.update({p.id: signer.sign_production(p) for p in batch})
    got = {m.id: m.headers[MAC_HEADER] for m in read_topic(stack.bootstrap, topic)}
    assert got == expected
    assert {len(mac) for mac in got.values()} == {16, 17}
