"""``mw retire COMPUTATION``: take a computation whose workers are gone for good out of
the watermark authority's topology, so that its consumers' watermarks stop waiting
for it.

What it does, in one Redis script (atomic with respect to every declaration and
report):

1. **Liveness.** The computation's last sign of life is the later of the newest
   entry on its report stream (a report, every 100 ms from each interval owner, or a
   grant) and its last declaration (every worker declares itself at start and every
   10 s, owning intervals or not). Both are times on Redis's clock (a stream id, and
   ``TIME`` in the declaration script), compared with Redis's clock: no host's clock
   matters. If that is less than ``quiet_s`` ago (15 s; at least 12, above the 10 s
   between declarations) the retirement is refused: a worker may still run, or still
   be on its way out (a SIGTERM drain reports last, after its final
   acknowledgements).
2. **Retirement.** The computation (and its rekey stages, which run in its process)
   leaves the topology hash and gets a record in the retirements hash: when, its
   declaration (what it wrote), and the end offset of each of its output partitions
   at that moment.

The authority picks the record up at its next topology refresh (``topology_refresh_s``,
0.5 s): it applies what is left on the computation's report stream, drops the node,
keeps its backlog segments plus one segment per output partition up to the recorded
end at its last published output watermark (records it may have written without
reporting them: no record it wrote can be older than that), and from then on holds
the consumers only until they have read past those.

A retirement is not a ban: a worker that declares the computation again (someone
started it) ends the retirement in the same step, and the authority takes it back.
The liveness rule is what keeps a worker that was merely slow to die from doing that.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from mwcore.errors import ConfigError, RefusedError
from mwcore.transport.topics import end_offsets, partition_counts
from mwcore.watermarks.reports import (
    NodeSpec,
    declared_key,
    report_stream,
    retired_key,
    topology_key,
)

QUIET_S = 15.0  # no sign of life for this long: the workers are gone
MIN_QUIET_S = 12.0  # workers declare themselves every 10 s (worker.py)

# KEYS[1] topology  KEYS[2] declaration times  KEYS[3] retirements
# KEYS[3+i] report stream of node i (i = 1..n)
# ARGV[1] quiet ms  ARGV[2] "1": retire, "0": only check  ARGV[3] n
# ARGV[3+i] name of node i  ARGV[3+n+i] its output partitions' end offsets (JSON object)
# Returns {"unknown", name} | {"live", name, ms ago, "reported"|"declared"} |
# {"ok", now ms, ms since the most recent sign of life of any of them}.
RETIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local quiet = tonumber(ARGV[1])
local n = tonumber(ARGV[3])
local nearest = now
for i = 1, n do
  local name = ARGV[3 + i]
  if redis.call('HEXISTS', KEYS[1], name) == 0 then
    return {'unknown', name}
  end
  local last, what = 0, 'reported'
  local e = redis.call('XREVRANGE', KEYS[3 + i], '+', '-', 'COUNT', 1)
  if #e > 0 then
    last = tonumber(string.match(e[1][1], '^(%d+)'))
  end
  local d = tonumber(redis.call('HGET', KEYS[2], name) or '0')
  if d > last then
    last, what = d, 'declared'
  end
  if now - last < quiet then
    return {'live', name, now - last, what}
  end
  if now - last < nearest then
    nearest = now - last
  end
end
if ARGV[2] == '1' then
  local at = string.format('%.0f', now)
  for i = 1, n do
    local name = ARGV[3 + i]
    local spec = redis.call('HGET', KEYS[1], name)
    local record = '{"at":' .. at .. ',"spec":' .. spec .. ',"ends":' .. ARGV[3 + n + i] .. '}'
    redis.call('HSET', KEYS[3], name, record)
    redis.call('HDEL', KEYS[1], name)
    redis.call('HDEL', KEYS[2], name)
  end
end
return {'ok', now, nearest}
"""


@dataclass(frozen=True)
class Retirement:
    """A retired computation, as ``mw retire`` recorded it for the authority."""

    name: str
    at_ms: int  # Redis's clock
    spec: NodeSpec  # its last declaration: what it read and wrote
    ends: dict[tuple[str, int], int] = field(default_factory=dict)  # output partition -> end offset

    @classmethod
    def decode(cls, name: str, raw: bytes | str) -> Retirement:
        data: dict[str, Any] = json.loads(raw)
        ends = {}
        for fld, end in data.get("ends", {}).items():
            topic, _, part = str(fld).rpartition(":")
            ends[(topic, int(part))] = int(end)
        return cls(name, int(data["at"]), NodeSpec.decode(name, json.dumps(data["spec"])), ends)


@dataclass(frozen=True)
class Outcome:
    name: str
    namespace: str
    retired: tuple[str, ...] = ()  # the computation, then its rekey stages
    consumers: tuple[str, ...] = ()  # computations that read what it wrote
    quiet_ms: int = 0  # since its last sign of life
    already: Retirement | None = None  # it was retired before: nothing done
    now_ms: int = 0

    def line(self) -> str:
        """What ``mw retire`` prints."""
        if self.already is not None:
            ago = max(0, self.now_ms - self.already.at_ms) / 1000
            return f"{self.name} was already retired {ago:.1f} s ago; nothing to do"
        stages = self.retired[1:]
        what = self.name + (f" and its rekey stage(s) {', '.join(stages)}" if stages else "")
        if self.consumers:
            verb = "waits" if len(self.consumers) == 1 else "wait"
            waiting = f"{', '.join(self.consumers)} no longer {verb} for it beyond the records it left unread"
        else:
            waiting = "no computation reads what it wrote"
        heard = (
            "never heard from"
            if self.quiet_ms >= self.now_ms
            else f"last heard from {self.quiet_ms / 1000:.1f} s ago"
        )
        return f"retired {what} from namespace {self.namespace!r} ({heard}); {waiting}"


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _topology(client: redis.Redis, namespace: str) -> dict[str, NodeSpec]:
    raw: dict[Any, Any] = client.hgetall(topology_key(namespace))
    return {_text(k): NodeSpec.decode(_text(k), v) for k, v in raw.items()}


def rekey_stages(name: str, topology: dict[str, NodeSpec]) -> list[str]:
    """The rekey stages a worker of ``name`` runs beside it (``mwcore.runtime.rekey``)."""
    prefix = f"{name}-rekey-".replace(".", "-")
    return sorted(n for n in topology if n.startswith(prefix) and n != name)


EndsOf = Callable[[NodeSpec], dict[str, int]]  # "topic:partition" -> end offset of its outputs


def kafka_ends(bootstrap: str) -> EndsOf:
    """Each existing output partition's end offset, from the broker (topics never
    created: none; empty partitions left out)."""

    def ends(spec: NodeSpec) -> dict[str, int]:
        counts = partition_counts(bootstrap, list(spec.outputs))
        return {f"{t}:{p}": end for (t, p), end in end_offsets(bootstrap, counts).items() if end > 0}

    return ends


class Retirer:
    def __init__(
        self, client: redis.Redis, ends_of: EndsOf, namespace: str, quiet_s: float = QUIET_S
    ) -> None:
        if quiet_s < MIN_QUIET_S:
            raise ConfigError(
                f"--quiet-s {quiet_s:g} is too short: workers declare themselves every 10 s, "
                f"so a silence under {MIN_QUIET_S:g} s does not show they are gone"
            )
        self._r = client
        self._ends_of = ends_of
        self._ns = namespace
        self._quiet_ms = int(quiet_s * 1000)
        self._script = client.register_script(RETIRE)

    def _run(self, names: list[str], commit: bool, ends: list[dict[str, int]]) -> list[Any]:
        keys = [topology_key(self._ns), declared_key(self._ns), retired_key(self._ns)]
        keys += [report_stream(self._ns, n) for n in names]
        args: list[Any] = [self._quiet_ms, "1" if commit else "0", len(names), *names]
        args += [json.dumps(e, separators=(",", ":")) for e in ends]
        result: list[Any] = self._script(keys=keys, args=args)
        status = _text(result[0])
        if status == "unknown":
            raise RefusedError(f"{_text(result[1])} left the topology meanwhile (retired by someone else?)")
        if status == "live":
            ago = int(result[2]) / 1000
            wait = max(0.1, self._quiet_ms / 1000 - ago)
            verb = "reported" if _text(result[3]) == "reported" else "declared themselves"
            node = _text(result[1])
            raise RefusedError(
                f"workers of {node} {verb} {ago:.1f} s ago; stop them first (or wait {wait:.1f} s)"
            )
        return result

    def retire(self, name: str) -> Outcome:
        topology = _topology(self._r, self._ns)
        spec = topology.get(name)
        if spec is None:
            raw = self._r.hget(retired_key(self._ns), name)
            if raw is not None:
                now = self._r.time()
                return Outcome(name, self._ns, already=Retirement.decode(name, raw), now_ms=_ms(now))
            known = ", ".join(sorted(n for n, s in topology.items() if s.kind == "computation"))
            raise RefusedError(
                f"no computation {name!r} in namespace {self._ns!r} (known: {known or 'none'})"
            )
        if spec.kind != "computation":
            raise RefusedError(
                f"{name!r} is an injector; retire retires computations (a missing injector process "
                "holds its consumers by design)"
            )
        names = [name, *rekey_stages(name, topology)]
        self._run(names, commit=False, ends=[{} for _ in names])  # refuse before asking Kafka
        ends = [self._ends_of(topology[n]) for n in names]
        result = self._run(names, commit=True, ends=ends)
        outputs = {t for n in names for t in topology[n].outputs}
        consumers = sorted(
            n
            for n, s in topology.items()
            if n not in names and s.kind == "computation" and outputs & set(s.inputs)
        )
        return Outcome(
            name, self._ns, tuple(names), tuple(consumers), quiet_ms=int(result[2]), now_ms=int(result[1])
        )


def _ms(redis_time: Any) -> int:
    seconds, micros = redis_time
    return int(seconds) * 1000 + int(micros) // 1000


def main(redis_url: str, bootstrap: str, namespace: str, name: str, quiet_s: float = QUIET_S) -> int:
    client = redis.Redis.from_url(redis_url, socket_connect_timeout=5, socket_timeout=30)
    try:
        outcome = Retirer(client, kafka_ends(bootstrap), namespace, quiet_s).retire(name)
    finally:
        client.close()
    print(f"mw retire: {outcome.line()}", flush=True)
    return 0
