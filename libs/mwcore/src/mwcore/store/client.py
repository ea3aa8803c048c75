"""The Redis client every process of the kit uses, with its timeouts and retries.

``MW_REDIS_URL`` names one Redis, or any one node of a Redis Cluster: the client asks
that node (``INFO cluster``) and, if it is a cluster node, becomes a cluster client
that discovers every other node from it. Every command the kit sends touches keys of
one hash slot (the keys of one interval, or of one namespace, share a hash tag), so
the same code runs on both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeAlias, cast

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError
from redis.retry import Retry

REDIS_RETRIES = 10  # about 7 s of backoff in all

# What the other layers hold and pass, without importing redis.
RedisClient: TypeAlias = "redis.Redis | RedisCluster"


def _options() -> dict[str, Any]:
    # Timeouts: a half-open connection must fail the step (and the worker restarts),
    # not hang it; a large checkpoint script takes well under the read timeout.
    # Retries ride out a Redis restart or failover of a few seconds; a longer outage
    # fails the step, and the worker aborts (its supervisor restarts it).
    return {
        "socket_keepalive": True,
        "socket_timeout": 30,
        "socket_connect_timeout": 5,
        "health_check_interval": 10,
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), REDIS_RETRIES),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    }


FAILOVER_S = 20.0  # how long a cluster command keeps trying while its primary fails over


class FailoverCluster(RedisCluster):
    """A cluster client whose commands ride out a failover: redis-py retries a command
    at once on a refreshed slot map, which is spent before the replica is promoted
    (the node timeout, then an election); this retries it with backoff for up to
    ``FAILOVER_S``."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        backoff = ExponentialBackoff(cap=1.0, base=0.05)
        deadline = time.monotonic() + FAILOVER_S
        attempt = 0
        while True:
            try:
                return super().execute_command(*args, **kwargs)  # type: ignore[no-untyped-call]
            except (redis.ConnectionError, redis.TimeoutError, ClusterDownError):
                attempt += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(backoff.compute(attempt))


def redis_client(url: str) -> RedisClient:
    """A client of the Redis (or Redis Cluster) at ``url``."""
    single = redis.Redis.from_url(url, **_options())
    if not is_cluster_node(single):
        return single
    single.close()
    return FailoverCluster.from_url(url, **_options())


def execute(client: RedisClient, build: Callable[[Any], None], *, transaction: bool = False) -> list[Any]:
    """Build a pipeline with ``build`` and run it; on a cluster, retry it with backoff
    while a primary fails over (redis-py retries a cluster pipeline at once, so its
    retries are spent before the failover is done)."""
    backoff = ExponentialBackoff(cap=1.0, base=0.05)
    deadline = time.monotonic() + FAILOVER_S
    attempt = 0
    while True:
        pipe = client.pipeline(transaction=transaction)
        build(pipe)
        try:
            result: list[Any] = pipe.execute()
            return result
        except (redis.ConnectionError, redis.TimeoutError, ClusterDownError):
            attempt += 1
            if not isinstance(client, RedisCluster) or time.monotonic() > deadline:
                raise
            time.sleep(backoff.compute(attempt))


def is_cluster_node(client: redis.Redis) -> bool:
    """Whether ``client``'s Redis runs in cluster mode (False if it cannot be asked:
    the start's preflight check then says why)."""
    try:
        info: Any = client.info("cluster")
    except redis.RedisError:
        return False
    return bool(info.get("cluster_enabled"))


def is_cluster(client: RedisClient) -> bool:
    return isinstance(client, RedisCluster)


def default_wait_replicas(client: RedisClient) -> int:
    """How many replicas a checkpoint waits for by default: 1 if the store has any
    (a cluster with replicas; a single Redis with a connected replica), else 0."""
    if isinstance(client, RedisCluster):
        return 1 if cast(Any, client).get_replicas() else 0
    try:
        info: Any = client.info("replication")
    except redis.ResponseError:  # INFO not allowed to this user: set MW_REDIS_WAIT_REPLICAS
        return 0
    return 1 if int(info.get("connected_slaves", 0)) > 0 else 0


def redis_ready(port: int, password: str = "", host: str = "127.0.0.1") -> bool:
    """Whether a Redis answers PING (done loading its data)."""
    client = redis.Redis(host=host, port=port, password=password or None, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except (redis.BusyLoadingError, redis.ConnectionError):
        return False
    finally:
        client.close()


def lost_redis(exc: BaseException) -> bool:
    """Whether ``exc`` says Redis did not answer (after the client's retries)."""
    return isinstance(exc, (redis.ConnectionError, redis.TimeoutError))


def pinger(url: str) -> Callable[[float], None]:
    """A ``PING`` of the Redis at ``url`` on a connection of its own, bounded by the
    seconds given (no retries: ``process/reachability.py`` asks again); raises when
    there is no answer."""
    held: list[redis.Redis] = []

    def ping(timeout_s: float) -> None:
        if not held:
            held.append(
                redis.Redis.from_url(
                    url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=None
                )
            )
        try:
            held[0].ping()
        except Exception:
            held.pop().close()
            raise

    return ping
