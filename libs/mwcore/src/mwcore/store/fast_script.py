"""A script caller that packs its commands with hiredis, on a connection of its own.

redis-py's generic packer costs about 3 microseconds per argument, and a checkpoint
of a large batch has tens of thousands of arguments; ``hiredis.pack_command`` packs
them in C (the replies are parsed by hiredis too, through redis-py's connection).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, cast

import hiredis
import redis
from redis.exceptions import NoScriptError

# hiredis takes exactly these: ints are written in decimal (an int subclass such as
# bool is refused), str as UTF-8, bytes unchanged.
Arg = bytes | str | int

# hiredis's stub types the argument as a one-item tuple; it takes any length.
_pack: Callable[[tuple[Arg, ...]], bytes] = cast(Any, hiredis.pack_command)


def pack_call(sha: str, keys: Sequence[Arg], args: Sequence[Arg]) -> bytes:
    """The EVALSHA command of one call, in RESP."""
    return _pack(("EVALSHA", sha, len(keys), *keys, *args))


class FastScript:
    """Calls one Lua script by its SHA, loading it when Redis does not have it."""

    def __init__(self, client: redis.Redis, source: str) -> None:
        self._client = client
        self._source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        self._conn: Any = None

    def _connection(self) -> Any:
        if self._conn is None:
            pool = self._client.connection_pool
            self._conn = pool.connection_class(**pool.connection_kwargs)
        return self._conn

    def __call__(self, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        reply = self.call_many([(keys, args)])[0]
        if isinstance(reply, redis.ResponseError):
            raise reply
        return reply

    def call_many(self, calls: Sequence[tuple[Sequence[Arg], Sequence[Arg]]]) -> list[Any]:
        """Run the script once per (keys, args), all in one round trip. Each reply is
        in the order of the calls; an error reply is returned as its ResponseError."""
        packed = [pack_call(self.sha, keys, args) for keys, args in calls]
        conn = self._connection()
        try:
            replies = _round_trip(conn, packed)
            missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
            if missing:
                self._client.script_load(self._source)
                for i, reply in zip(missing, _round_trip(conn, [packed[i] for i in missing]), strict=True):
                    replies[i] = reply
            return replies
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()
            raise


def _round_trip(conn: Any, packed: list[bytes]) -> list[Any]:
    conn.send_packed_command(packed, check_health=False)
    replies: list[Any] = []
    for _ in packed:
        try:
            replies.append(conn.read_response())
        except redis.ResponseError as exc:  # read whole: the next reply stays in step
            replies.append(exc)
    return replies
