"""A script caller that packs its commands with hiredis, on connections of its own.

redis-py's generic packer costs about 3 microseconds per argument, and a checkpoint
of a large batch has tens of thousands of arguments; ``hiredis.pack_command`` packs
them in C (the replies are parsed by hiredis too, through redis-py's connection).

On a Redis Cluster each call goes to the primary that serves its first key's slot
(the kit's scripts keep all their keys in one slot), one connection per primary, the
calls for each primary in one round trip. A ``MOVED``/``ASK``/``TRYAGAIN``/
``CLUSTERDOWN`` reply (a failover, or slots moving) refreshes the slot map and the
call is sent again; so is a call whose primary cannot be reached, until
``retry_s`` has passed (a failover takes the cluster's node timeout and an election).

``replicas``: after the calls, ``WAIT`` for that many replicas of the primary (at most
as many as it has, as last seen) to acknowledge them, within ``wait_ms``; fewer is
an error (``NotReplicatedError``): the caller must not treat the calls as durable.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

import hiredis
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    NoScriptError,
    TryAgainError,
)

from mwcore.store.client import RedisClient

# hiredis takes exactly these: ints are written in decimal (an int subclass such as
# bool is refused), str as UTF-8, bytes unchanged.
Arg = bytes | str | int

# hiredis's stub types the argument as a one-item tuple; it takes any length.
_pack: Callable[[tuple[Arg, ...]], bytes] = cast(Any, hiredis.pack_command)

_REROUTE = (MovedError, AskError, TryAgainError, ClusterDownError)


class NotReplicatedError(redis.RedisError):
    """The primary wrote the calls, but fewer replicas than asked acknowledged them."""


def pack_call(sha: str, keys: Sequence[Arg], args: Sequence[Arg]) -> bytes:
    """The EVALSHA command of one call, in RESP."""
    return _pack(("EVALSHA", sha, len(keys), *keys, *args))


class Packed(NamedTuple):
    """A call whose ``EVALSHA`` command the caller packed itself (the native core
    packs a checkpoint straight from its dicts): sent as it is."""

    command: bytes


Call = tuple[Sequence[Arg], Sequence[Arg] | Packed]  # (keys: the first routes it, args)


def packed(sha: str, call: Call) -> bytes:
    keys, args = call
    return args.command if isinstance(args, Packed) else pack_call(sha, keys, args)


class FastScript:
    """Calls one Lua script by its SHA, loading it when Redis does not have it."""

    def __init__(
        self,
        client: RedisClient,
        source: str,
        *,
        replicas: int = 0,
        wait_ms: int = 5_000,
        retry_s: float = 20.0,
    ) -> None:
        self._client = client
        self._source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        self.replicas = replicas
        self._wait_ms = wait_ms
        self._retry_s = retry_s
        self._conns: dict[str, Any] = {}

    def __call__(self, keys: Sequence[Arg], args: Sequence[Arg] | Packed) -> Any:
        reply = self.call_many([(keys, args)])[0]
        if isinstance(reply, redis.ResponseError):
            raise reply
        return reply

    def call_many(self, calls: Sequence[Call]) -> list[Any]:
        """Run the script once per (keys, args), in one round trip per primary. Each
        reply is in the order of the calls; an error reply is returned as its
        ResponseError."""
        replies: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        deadline = time.monotonic() + self._retry_s
        delay = 0.05
        while True:
            try:
                todo = self._send(calls, todo, replies)
            except (redis.ConnectionError, redis.TimeoutError):
                # (a cluster: its primary may be failing over; every call is resent)
                if not isinstance(self._client, RedisCluster) or time.monotonic() > deadline:
                    raise
            if not todo:
                return replies
            if time.monotonic() > deadline:
                raise ClusterError(f"the cluster did not settle within {self._retry_s:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
            with contextlib.suppress(redis.RedisError):  # no node answered yet: try again
                cast(RedisCluster, self._client).nodes_manager.initialize()

    def _send(self, calls: Sequence[Call], todo: list[int], replies: list[Any]) -> list[int]:
        """Send the calls ``todo``, grouped by node; fill in their replies; return the
        ones to send again (rerouted by the cluster)."""
        groups: dict[str, tuple[Any, int, list[int]]] = {}
        for i in todo:
            name, conn, replicas = self._route(calls[i][0])
            groups.setdefault(name, (conn, replicas, []))[2].append(i)
        again: list[int] = []
        for conn, replicas, members in groups.values():
            commands = [packed(self.sha, calls[i]) for i in members]
            try:
                got = self._round_trip_loading(conn, commands, replicas)
            except (redis.ConnectionError, redis.TimeoutError):
                conn.disconnect()
                raise
            for i, reply in zip(members, got, strict=True):
                if isinstance(reply, _REROUTE):
                    again.append(i)
                else:
                    replies[i] = reply
        return again

    def _route(self, keys: Sequence[Arg]) -> tuple[str, Any, int]:
        """(node name, connection, replicas to wait for) of the calls with these keys."""
        client = self._client
        if not isinstance(client, RedisCluster):
            return "", self._connection("", client.connection_pool), self.replicas
        key = keys[0]
        slot = key_slot(
            key.encode() if isinstance(key, str) else key if isinstance(key, bytes) else b"%d" % key
        )
        nodes = client.nodes_manager.slots_cache.get(slot) or []
        if not nodes:
            client.nodes_manager.initialize()
            nodes = client.nodes_manager.slots_cache[slot]
        primary = nodes[0]
        if primary.redis_connection is None:
            cast(Any, client.nodes_manager).create_redis_connections([primary])
        conn = self._connection(primary.name, primary.redis_connection.connection_pool)
        return primary.name, conn, min(self.replicas, len(nodes) - 1)

    def _connection(self, name: str, pool: Any) -> Any:
        conn = self._conns.get(name)
        if conn is None:
            conn = self._conns[name] = pool.connection_class(**pool.connection_kwargs)
        return conn

    def _round_trip_loading(self, conn: Any, packed: list[bytes], replicas: int) -> list[Any]:
        """The calls on one connection (then WAIT, if asked), loading the script if the
        node does not have it."""
        replies = _round_trip(conn, packed, replicas, self._wait_ms)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            conn.send_command("SCRIPT", "LOAD", self._source)
            conn.read_response()
            again = _round_trip(conn, [packed[i] for i in missing], replicas, self._wait_ms)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies


def _round_trip(conn: Any, packed: list[bytes], replicas: int, wait_ms: int) -> list[Any]:
    waits = replicas > 0
    if waits:
        packed = [*packed, _pack(("WAIT", replicas, wait_ms))]
    conn.send_packed_command(packed, check_health=False)
    replies: list[Any] = []
    for _ in packed:
        try:
            replies.append(conn.read_response())
        except redis.ResponseError as exc:  # read whole: the next reply stays in step
            replies.append(exc)
    if not waits:
        return replies
    acked = replies.pop()
    if isinstance(acked, int) and acked >= replicas:
        return replies
    raise NotReplicatedError(
        f"{acked} of {replicas} replicas acknowledged the checkpoint within {wait_ms} ms"
    )
