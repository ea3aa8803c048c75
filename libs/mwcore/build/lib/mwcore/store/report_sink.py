"""Where reports go: the Redis report streams (or nowhere, for in-memory unit tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import structlog

from mwcore.store.client import RedisClient, execute
from mwcore.watermarks.report_format import (
    STREAM_MAXLEN,
    NodeSpec,
    Report,
    declared_key,
    report_stream,
    retired_key,
    topology_key,
)

log = structlog.get_logger("mwcore.reports")

# KEYS[1] topology  KEYS[2] declaration times  KEYS[3] retirements
# ARGV[1] name  ARGV[2] spec
# One step: the spec, when it was declared (Redis's clock: ``mw retire`` compares it
# with its own reading of that clock), and the end of a retirement, if there was one
# (a declared node is in the topology again). Returns 1 if it ended a retirement.
DECLARE = """
local t = redis.call('TIME')
local ms = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ms)
return redis.call('HDEL', KEYS[3], ARGV[1])
"""


class ReportSink(Protocol):
    def declare(self, spec: NodeSpec) -> None:
        """Tell the authority what this node reads and writes (idempotent; also what
        ``mw retire`` takes for a sign of life)."""
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
    def __init__(self, client: RedisClient, namespace: str) -> None:
        self._r = client
        self._ns = namespace
        self._declare = client.register_script(DECLARE)

    def declare(self, spec: NodeSpec) -> None:
        keys = [topology_key(self._ns), declared_key(self._ns), retired_key(self._ns)]
        if self._declare(keys=keys, args=[spec.name, spec.encode()]):
            # Someone started it again after `mw retire`: it is back in the topology.
            log.warning("declared_after_retirement", node=spec.name, namespace=self._ns)

    def send(self, name: str, reports: Sequence[Report]) -> None:
        if not reports:
            return
        entries = [(report_stream(self._ns, name, r.index), r.encode()) for r in reports]

        def build(pipe: Any) -> None:
            for key, entry in entries:  # each to its interval's own stream (on a cluster: its slot)
                pipe.xadd(key, {"r": entry}, maxlen=STREAM_MAXLEN, approximate=True)

        execute(self._r, build)
