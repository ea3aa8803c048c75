"""An injector process's durable state in Redis: its token (granted like an interval's,
so a replaced process's writes are refused), its promise (the low watermark it reported,
kept so a restart never forgets it), and its source's own progress (``finish``)."""

from __future__ import annotations

from mwcore.store.client import RedisClient
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore


class InjectorState:
    def __init__(self, client: RedisClient, namespace: str, name: str, index: int) -> None:
        self._r = client
        self._store = RedisCheckpointStore(client)
        self._interval = IntervalId(namespace, name, index)
        # In the token's hash slot: the fenced promise is set in one script with it.
        self._promise_key = f"mw:{self._interval.tag()}:promise"
        self._done_key = f"mw:{self._interval.tag()}:done"

    def grant(self, owner: str) -> str:
        """A new token for this process: any earlier holder's promises are refused."""
        return self._store.grant(self._interval, owner)

    def promise(self) -> int | None:
        """The last promise a run of this process stored (None: never)."""
        raw = self._r.get(self._promise_key)
        return None if raw is None else int(raw)

    def promise_fenced(self, token: str, watermark: int) -> None:
        """Store a promise while ``token`` is current (else ``FencedError``)."""
        self._store.fenced_set(self._interval, token, self._promise_key, watermark)

    def finished(self) -> set[str]:
        raw = self._r.smembers(self._done_key)
        return {m.decode() if isinstance(m, bytes) else str(m) for m in raw}

    def finish(self, item: str) -> None:
        self._r.sadd(self._done_key, item)
