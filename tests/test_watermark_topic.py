"""The watermark topic is compacted on Apache Kafka: once the log cleaner has run, the
old values of each computation are gone from the cleaned segments while the latest
value of every computation stays. The negative control creates the topic without the
kit's compaction setting and shows the same check fails on it (every old value stays)
while a compacted topic beside it, fed the same, is cleaned.

To see compaction within a test, the topic's segments are made to roll every 100 ms
(``segment.ms``) and any dirty share is cleanable; the cleanup policy is the one
``ensure_watermark_topic`` created the topic with.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport import watermark_topic as feed
from mwcore.transport.topics import producer_config
from mwcore.transport.watermark_topic import ensure_watermark_topic
from mwcore.watermarks.published import Watermarks
from testbed.procs import wait_until
from testbed.topics import read_topic

pytestmark = pytest.mark.watermarks

NAMES = ("injector", "windower", "dip_detector")
ROUNDS = 12


def _policy(bootstrap: str, topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (fut,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return str(fut.result()["cleanup.policy"].value)


def _roll_segments_fast(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in {
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
        }.items()
    ]
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result()


def _publish_rounds(bootstrap: str, topics: list[str]) -> None:
    """Round r publishes input = output = r for every computation, each round in a
    segment of its own (the next append after segment.ms rolls the segment)."""
    producer = Producer(producer_config(bootstrap))
    for r in range(ROUNDS):
        for topic in topics:
            for name in NAMES:
                producer.produce(topic, Watermarks(name, "computation", r, r, r, r, at=r).encode(), name)
        assert producer.flush(10) == 0
        time.sleep(0.15)


def _rounds_left(bootstrap: str, topic: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {n: [] for n in NAMES}
    for m in read_topic(bootstrap, topic):
        wm = Watermarks.decode(m.value)
        out[wm.name].append(wm.input)
    return out


def _cleaned(rounds: dict[str, list[int]]) -> bool:
    """Old values gone (round 0 and most rounds after it), the latest of each kept."""
    return all(0 not in rs and len(rs) < ROUNDS // 2 and rs[-1] == ROUNDS - 1 for rs in rounds.values())


@pytest.fixture
def topics(stack: LocalStack, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    compacted = ensure_watermark_topic(stack.bootstrap, namespace)
    # The mechanism off: the same topic created without the kit's compaction settings.
    monkeypatch.setattr(feed, "COMPACTED", {"cleanup.policy": "delete", "segment.ms": "600000"})
    plain = ensure_watermark_topic(stack.bootstrap, f"{namespace}-plain")
    monkeypatch.undo()
    for t in (compacted, plain):
        _roll_segments_fast(stack.bootstrap, t)
    yield {"compacted": compacted, "plain": plain}


def test_old_watermarks_are_compacted_away_and_the_latest_stays(
    stack: LocalStack, namespace: str, topics: dict[str, str]
) -> None:
    topic = topics["compacted"]
    assert _policy(stack.bootstrap, topic) == "compact"
    _publish_rounds(stack.bootstrap, [topic])
    wait_until(lambda: _cleaned(_rounds_left(stack.bootstrap, topic)), 90, 1.0, "the log cleaner")
    left = _rounds_left(stack.bootstrap, topic)
    assert {n: rs[-1] for n, rs in left.items()} == dict.fromkeys(NAMES, ROUNDS - 1)
    # a follower reading from the beginning still ends at the latest value of each
    f = feed.WatermarkFeed(stack.bootstrap, namespace)
    try:
        f.read_to_end()
        assert {n: f.latest[n].input for n in NAMES} == dict.fromkeys(NAMES, ROUNDS - 1)
    finally:
        f.close()


@pytest.mark.negative_control
def test_without_compaction_the_check_fails(stack: LocalStack, topics: dict[str, str]) -> None:
    assert _policy(stack.bootstrap, topics["plain"]) == "delete"
    _publish_rounds(stack.bootstrap, [topics["compacted"], topics["plain"]])
    # The cleaner has run on the compacted twin, fed the same in the same rounds ...
    wait_until(
        lambda: _cleaned(_rounds_left(stack.bootstrap, topics["compacted"])), 90, 1.0, "the log cleaner"
    )
    # ... and the proving check fails on the topic without the setting: every value stays.
    left = _rounds_left(stack.bootstrap, topics["plain"])
    assert not _cleaned(left)
    assert left == {n: list(range(ROUNDS)) for n in NAMES}
