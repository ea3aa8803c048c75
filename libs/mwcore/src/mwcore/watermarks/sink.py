"""Where reports go: the Redis report streams (or nowhere, for in-memory unit tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import redis

from mwcore.watermarks.reports import STREAM_MAXLEN, NodeSpec, Report, report_stream, topology_key


class ReportSink(Protocol):
    def declare(self, spec: NodeSpec) -> None:
        """Tell the authority what this node reads and writes (idempotent)."""
        ...

    def send(self, name: str, reports: Sequence[Report]) -> None:
        """Append reports to the node's stream, in order; raises if not written."""
        ...


class NullReportSink:
    def declare(self, spec: NodeSpec) -> None:
        return None

    def send(self, name: str, reports: Sequence[Report]) -> None:
        return None


class RedisReportSink:
    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self._r = client
        self._ns = namespace

    def declare(self, spec: NodeSpec) -> None:
        self._r.hset(topology_key(self._ns), spec.name, spec.encode())

    def send(self, name: str, reports: Sequence[Report]) -> None:
        if not reports:
            return
        key = report_stream(self._ns, name)
        pipe = self._r.pipeline(transaction=False)
        for r in reports:
            pipe.xadd(key, {"r": r.encode()}, maxlen=STREAM_MAXLEN, approximate=True)
        pipe.execute()
