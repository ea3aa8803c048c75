"""The watermark authority's side of Redis: the report streams read in order, the
topology and retirements, the interval tokens, and its journal
(``watermarks.authority.AuthorityLog``).

Keys (``watermarks/report_format.py``): one stream per interval of each node,
``mw:{<ns>/<name>/<index>}:wmr``, the topology and retirement hashes, and one journal
string per authority shard, ``mw:wma:<ns>:<shard>``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from mwcore.store.client import RedisClient, execute, is_cluster
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore
from mwcore.watermarks.report_format import (
    Grant,
    NodeSpec,
    Report,
    Stream,
    decode_entry,
    report_stream,
    retired_key,
    topology_key,
)
from mwcore.watermarks.retire import Retirement

Entry = tuple[str, Report | Grant]  # (stream id, what it says)


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class RedisAuthorityLog:
    def __init__(self, client: RedisClient, namespace: str) -> None:
        self._r = client
        self.namespace = namespace
        self._tokens = RedisCheckpointStore(client)

    def topology(self) -> tuple[dict[str, NodeSpec], dict[str, Retirement]]:
        """Declared nodes and retired computations, as one snapshot of both hashes."""

        def build(pipe: Any) -> None:
            pipe.hgetall(topology_key(self.namespace))
            pipe.hgetall(retired_key(self.namespace))

        declared, retired = execute(self._r, build, transaction=True)
        specs = {_text(n): NodeSpec.decode(_text(n), raw) for n, raw in declared.items()}
        gone = {_text(n): Retirement.decode(_text(n), raw) for n, raw in retired.items()}
        return specs, gone

    def read(self, after: Mapping[Stream, str], block_ms: int) -> dict[Stream, list[Entry]]:
        """New entries of each stream after its position ("0-0": from the start),
        waiting up to ``block_ms`` for any. On one Redis: one blocking XREAD of every
        stream; on a cluster (an XREAD's streams must share a slot) one XREAD per stream
        in a pipeline, then a sleep of ``block_ms`` if there was nothing new."""
        keys = {report_stream(self.namespace, *s): s for s in after}
        if not is_cluster(self._r):
            streams = {key: after[s] for key, s in keys.items()}
            resp: Any = self._r.xread(streams, count=10_000, block=block_ms or None)  # type: ignore[arg-type]
            return {keys[_text(key)]: _entries(entries) for key, entries in resp or []}

        def build(pipe: Any) -> None:
            for key, s in keys.items():
                pipe.xread({key: after[s]}, count=10_000)

        found: dict[Stream, list[Entry]] = {}
        for resp in execute(self._r, build):
            for key, entries in resp or []:
                found[keys[_text(key)]] = _entries(entries)
        if not found and block_ms:
            time.sleep(block_ms / 1000)
        return found

    def read_after(self, stream: Stream, after: str, count: int = 10_000) -> list[Entry]:
        """Entries of ``stream`` after ``after``, without waiting."""
        raw = self._r.xrange(report_stream(self.namespace, *stream), min=f"({after}", max="+", count=count)
        return _entries(raw)

    def oldest_id(self, stream: Stream) -> str | None:
        """The first entry still on ``stream`` (trimming drops older ones)."""
        first: Any = self._r.xrange(report_stream(self.namespace, *stream), count=1)
        return _text(first[0][0]) if first else None

    def trim(self, stream: Stream, below: str) -> None:
        """Drop ``stream``'s entries before ``below``."""
        self._r.xtrim(report_stream(self.namespace, *stream), minid=below)

    def current_token(self, name: str, index: int) -> str | None:
        return self._tokens.current_token(IntervalId(self.namespace, name, index))

    def load_journal(self, shard: int) -> str | None:
        raw: Any = self._r.get(_journal_key(self.namespace, shard))
        return None if raw is None else _text(raw)

    def save_journal(self, shard: int, journal: str) -> None:
        self._r.set(_journal_key(self.namespace, shard), journal)


def _journal_key(namespace: str, shard: int) -> str:
    return f"mw:wma:{namespace}:{shard}"


def _entries(raw: Any) -> list[Entry]:
    return [(_text(entry_id), decode_entry(fields.get(b"r") or fields.get("r"))) for entry_id, fields in raw]
