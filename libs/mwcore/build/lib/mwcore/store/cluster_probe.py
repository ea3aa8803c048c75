"""Questions to one Redis Cluster node, by port: what the local cluster
(``tools/stack/redis_cluster.py``) and the start's preflight check ask of it."""

from __future__ import annotations

from typing import Any, cast

import redis
from redis.crc import key_slot


def _node(port: int, host: str = "127.0.0.1") -> redis.Redis:
    return redis.Redis(host=host, port=port, socket_connect_timeout=2, socket_timeout=5)


def cluster_info(client: redis.Redis) -> dict[str, str]:
    """``CLUSTER INFO`` of one node, as a dict of strings."""
    raw: Any = cast(Any, client).execute_command("CLUSTER", "INFO")
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.strip().split(":", 1) for line in text.splitlines() if ":" in line)


def _slots(client: redis.Redis) -> list[Any]:
    return list(cast(Any, client).execute_command("CLUSTER", "SLOTS"))


def settled(port: int, nodes: int) -> bool:
    """Whether this node says the cluster is ok with every slot served, is in sync with
    its primary (a replica), and knows ``nodes`` nodes serving slots (as clients learn
    them, from ``CLUSTER SLOTS``). False while it cannot say."""
    c = _node(port)
    try:
        info = cluster_info(c)
        if info.get("cluster_state") != "ok" or int(info.get("cluster_slots_ok", 0)) != 16384:
            return False
        repl: Any = c.info("replication")
        if repl.get("role") != "master" and repl.get("master_link_status") != "up":
            return False
        known = {tuple(node[:2]) for entry in _slots(c) for node in entry[2:]}
        return len(known) >= nodes
    except redis.RedisError:
        return False
    finally:
        c.close()


def primary_port(port: int, key: str) -> int:
    """The port of the primary that serves ``key``'s slot, as node ``port`` sees it."""
    c = _node(port)
    try:
        slot = key_slot(key.encode())
        for start, end, primary, *_ in _slots(c):
            if start <= slot <= end:
                return int(primary[1])
    finally:
        c.close()
    raise LookupError(f"no node serves {key}")
