"""The local stack a command asked for: one broker or a Kafka cluster, one Redis or a
Redis Cluster (``mw up --brokers 3 --redis-cluster``, ``mw stack``, the fault suite)."""

from __future__ import annotations

from pathlib import Path

from mwcore.errors import ConfigError
from mwcore.tools.stack.kafka_broker import KafkaBroker
from mwcore.tools.stack.kafka_cluster import KafkaCluster
from mwcore.tools.stack.localstack import LocalKafka, LocalRedis, LocalStack, RedisServer
from mwcore.tools.stack.redis_cluster import LocalRedisCluster


def local_stack(workdir: Path | None = None, *, brokers: int = 1, redis_cluster: bool = False) -> LocalStack:
    if brokers < 1:
        raise ConfigError(f"--brokers {brokers}: at least 1")
    broker: LocalKafka = KafkaBroker() if brokers == 1 else KafkaCluster(brokers=brokers)
    redis: LocalRedis = LocalRedisCluster() if redis_cluster else RedisServer()
    return LocalStack(workdir=workdir, broker=broker, redis=redis)
