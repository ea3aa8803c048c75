"""Kafka transport on confluent-kafka: client configs, topic names, topic creation.

Configs are tuned for low latency: producers are idempotent with ``acks=all`` and
partition with murmur2 (what Java clients use, so keys land where Kafka Streams or
Flink would put them); consumers use a 1.5 s session timeout (a dead worker's
intervals move on in under 3 s) and large fetches. Topics are created
explicitly (brokers should run with ``auto.create.topics.enable=false``: an
auto-created topic gets the broker's partition count, not the computation's).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from mwcore.errors import ConfigError
from mwcore.transport.client_properties import client_properties


def topic_name(namespace: str, stream: str) -> str:
    """Streams of the default namespace are plain topics; others are prefixed."""
    return stream if namespace == "default" else f"{namespace}.{stream}"


def dead_letter_stream(computation: str) -> str:
    return f"{computation}.dead-letters"


def late_stream(computation: str) -> str:
    return f"{computation}.late"


def rekey_stream(computation: str, stream: str) -> str:
    return f"{computation}-rekey-{stream}"


def admin_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """An admin client's: the servers and the user's client properties (security)."""
    return {"bootstrap.servers": bootstrap, **client_properties(), **overrides}


MESSAGE_TIMEOUT_MS = 30_000


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "batch.size": 1_000_000,
        "compression.type": "lz4",
        "partitioner": "murmur2_random",
        "queue.buffering.max.messages": 500_000,
        # How long librdkafka keeps retrying a production (its default: 300 s). A worker
        # that lost its intervals without a revocation (a paused process whose session
        # ran out) leaves what is unacknowledged to the next owner, which re-sends it; its
        # own copy may still land until this runs out, and consumers drop it only while
        # its id is in their seen set (MW_SEEN_GC_SLACK_MS of event time behind their
        # watermark). A revocation purges its leftovers (runtime/stopping.py). A
        # production that times out is re-queued by its interval and sent again.
        "message.timeout.ms": MESSAGE_TIMEOUT_MS,
    }
    conf.update(client_properties())  # security, or a tuning of the user's
    conf.update(overrides)
    return conf


def consumer_config(
    bootstrap: str, group: str, instance_id: str | None = None, **overrides: Any
) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "range",  # co-partitioned inputs stay together
        # A dead worker's intervals move on after the session timeout: 1.5 s (brokers
        # must allow it: group.min.session.timeout.ms, 6 s by default, is 1 s in the
        # local stack and compose). Heartbeats come from librdkafka's own thread, so
        # a busy Python loop does not miss them.
        "session.timeout.ms": 1500,
        "heartbeat.interval.ms": 150,
        # Also the rebalance timeout: how long a stopped member can hold up a rebalance.
        "max.poll.interval.ms": 10_000,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 8_388_608,
        "queued.min.messages": 200_000,
        # Kafka holds a fetch until data arrives (fetch.min.bytes 1), so a long wait
        # costs no latency; a short one makes every idle consumer poll the broker
        # (at 10 ms, three idle consumers took 67% of a core of the broker, here).
        "fetch.wait.max.ms": 500,
        "enable.partition.eof": False,
    }
    if instance_id:
        conf["group.instance.id"] = instance_id
    conf.update(client_properties())  # security, or a tuning of the user's
    conf.update(overrides)
    return conf


def ensure_topics(
    bootstrap: str,
    topics: Mapping[str, int],
    timeout: float = 30.0,
    config: Mapping[str, str] | None = None,
) -> None:
    """Create each missing topic with the given partition count; wait until it is visible.

    An existing topic is left as it is; a partition count that differs from the one
    asked for is a configuration error (keys would map to other intervals).
    """
    if not topics:
        return
    admin = AdminClient(admin_config(bootstrap))
    existing = admin.list_topics(timeout=timeout).topics
    # replication_factor -1: the broker's default.replication.factor (1 on a single node)
    missing = [NewTopic(t, n, -1, config=dict(config or {})) for t, n in topics.items() if t not in existing]
    for t, n in topics.items():
        if t in existing and len(existing[t].partitions) != n:
            raise ConfigError(f"topic {t} has {len(existing[t].partitions)} partitions, expected {n}")
    if missing:
        for fut in admin.create_topics(missing, operation_timeout=timeout).values():
            try:
                fut.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(timeout=timeout).topics
        if all(t in meta and len(meta[t].partitions) == n for t, n in topics.items()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics not visible after {timeout}s: {sorted(topics)}")
        time.sleep(0.1)


def partition_counts(bootstrap: str, topics: list[str], timeout: float = 30.0) -> dict[str, int]:
    admin = AdminClient(admin_config(bootstrap))
    meta = admin.list_topics(timeout=timeout).topics
    return {t: len(meta[t].partitions) for t in topics if t in meta}


def stream_partitions(bootstrap: str, stream: str, namespace: str = "default") -> int | None:
    """How many partitions ``stream`` has in ``namespace``; None if it does not exist."""
    topic = topic_name(namespace, stream)
    return partition_counts(bootstrap, [topic]).get(topic)


def end_offsets(
    bootstrap: str, topics: Mapping[str, int], timeout: float = 30.0, admin: AdminClient | None = None
) -> dict[tuple[str, int], int]:
    """The offset after the last record of every partition (ListOffsets "latest": the
    high watermark, which with ``acks=all`` is every acknowledged record). ``admin``: a
    client to ask with (one kept across many asks; a new one connects each time)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    parts = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    if not parts:
        return {}
    if admin is None:
        admin = AdminClient(admin_config(bootstrap))
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets({tp: latest for tp in parts}, request_timeout=timeout)
    return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}


def committed_offsets(
    bootstrap: str, group: str, topics: Mapping[str, int], timeout: float = 10.0
) -> dict[tuple[str, int], int]:
    """The offsets consumer group ``group`` committed on every partition of ``topics``
    (a negative offset: none committed there)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    parts = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    if not parts:
        return {}
    admin = AdminClient(admin_config(bootstrap))
    asked = [ConsumerGroupTopicPartitions(group, parts)]
    got = admin.list_consumer_group_offsets(asked, request_timeout=timeout)[group].result()
    return {(tp.topic, tp.partition): int(tp.offset) for tp in got.topic_partitions}


def partition_ends(bootstrap: str, topics: Sequence[str]) -> dict[str, int]:
    """ "topic:partition" -> end offset of every partition holding records, of the
    topics that exist."""
    counts = partition_counts(bootstrap, list(topics))
    return {f"{t}:{p}": end for (t, p), end in end_offsets(bootstrap, counts).items() if end > 0}


def topic_partitions(bootstrap: str, timeout: float = 10.0) -> dict[str, int]:
    """Every topic the cluster has (internal ones left out) and its partition count."""
    admin = AdminClient(admin_config(bootstrap))
    meta = admin.list_topics(timeout=timeout).topics
    return {
        name: len(t.partitions)
        for name, t in meta.items()
        if not name.startswith("__") and t.error is None and t.partitions
    }


def broker_count(bootstrap: str) -> int:
    """How many brokers the cluster's metadata lists (0: no answer)."""
    try:
        return len(AdminClient(admin_config(bootstrap, log_level=0)).list_topics(timeout=1).brokers)
    except Exception:
        return 0


def broker_ready(bootstrap: str) -> bool:
    """Whether the broker answers metadata and can coordinate a group (asking for a
    group's coordinator creates ``__consumer_offsets``: done once here, so the first
    consumer does not wait for it)."""
    admin = AdminClient(admin_config(bootstrap, log_level=0))
    try:
        if not admin.list_topics(timeout=1).brokers:
            return False
        admin.describe_consumer_groups(["mw-warmup"], request_timeout=5)["mw-warmup"].result()
    except Exception:
        return False
    return True
