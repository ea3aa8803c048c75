"""The Redis client every process of the kit uses, with its timeouts and retries."""

from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

REDIS_RETRIES = 10  # about 7 s of backoff in all

RedisClient = redis.Redis  # what the other layers hold and pass, without importing redis


def redis_client(url: str) -> redis.Redis:
    # Timeouts: a half-open connection must fail the step (and the worker restarts),
    # not hang it; a large checkpoint script takes well under the read timeout.
    # Retries ride out a Redis restart or failover of a few seconds; a longer outage
    # fails the step, and the worker aborts (its supervisor restarts it).
    return redis.Redis.from_url(
        url,
        socket_keepalive=True,
        socket_timeout=30,
        socket_connect_timeout=5,
        health_check_interval=10,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), REDIS_RETRIES),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )


def redis_ready(port: int, password: str = "", host: str = "127.0.0.1") -> bool:
    """Whether a Redis answers PING (done loading its data)."""
    client = redis.Redis(host=host, port=port, password=password or None, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except (redis.BusyLoadingError, redis.ConnectionError):
        return False
    finally:
        client.close()
