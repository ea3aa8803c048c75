"""``mw retire``'s side of Redis (``watermarks.retire.RetireLog``): the topology, the
retirements, and the retirement itself, in one script that is atomic with respect to
every declaration and report (``watermarks/retire.py`` says what it decides and why).
"""

from __future__ import annotations

import json
from typing import Any

from mwcore.store.client import RedisClient, execute
from mwcore.watermarks.report_format import (
    NodeSpec,
    declared_key,
    report_stream,
    retired_key,
    streams,
    topology_key,
)
from mwcore.watermarks.retire import Check, Retirement

# KEYS[1] topology  KEYS[2] declaration times  KEYS[3] retirements
# ARGV[1] quiet ms  ARGV[2] "1": retire, "0": only check  ARGV[3] n
# ARGV[3+i] name of node i (i = 1..n)  ARGV[3+n+i] its output partitions' end offsets
# (JSON object)  ARGV[3+2n+i] the newest entry on any of its report streams (ms, 0: none;
# read just before: the streams are in the intervals' slots, not in this one)
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
  local last, what = tonumber(ARGV[3 + 2 * n + i]), 'reported'
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


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class RedisRetireLog:
    def __init__(self, client: RedisClient, namespace: str) -> None:
        self._r = client
        self._ns = namespace
        self._script = client.register_script(RETIRE)

    def declared(self) -> dict[str, NodeSpec]:
        raw: dict[Any, Any] = self._r.hgetall(topology_key(self._ns))
        return {_text(k): NodeSpec.decode(_text(k), v) for k, v in raw.items()}

    def retired(self, name: str) -> tuple[Retirement, int] | None:
        raw = self._r.hget(retired_key(self._ns), name)
        if raw is None:
            return None
        seconds, micros = self._r.time()
        return Retirement.decode(name, raw), int(seconds) * 1000 + int(micros) // 1000

    def check(self, names: list[str], quiet_ms: int, ends: list[dict[str, int]] | None) -> Check:
        keys = [topology_key(self._ns), declared_key(self._ns), retired_key(self._ns)]
        args: list[Any] = [quiet_ms, "0" if ends is None else "1", len(names), *names]
        args += [json.dumps(e, separators=(",", ":")) for e in (ends or [{} for _ in names])]
        args += self._last_reports(names)
        result: list[Any] = self._script(keys=keys, args=args)
        status = _text(result[0])
        if status == "unknown":
            return Check("unknown", _text(result[1]))
        if status == "live":
            return Check("live", _text(result[1]), int(result[2]), _text(result[3]))
        return Check("ok", now_ms=int(result[1]), ago_ms=int(result[2]))

    def _last_reports(self, names: list[str]) -> list[int]:
        """Per node, when the newest entry of any of its report streams was written
        (Redis's clock, ms; 0: none). Workers also declare themselves every 10 s, and
        the script checks that atomically: a node alive enough to report is declared."""
        specs = self.declared()
        keys: list[tuple[int, str]] = []
        for i, name in enumerate(names):
            spec = specs.get(name)
            keys += [(i, report_stream(self._ns, *s)) for s in (streams(spec) if spec is not None else [])]

        def build(pipe: Any) -> None:
            for _, key in keys:
                pipe.xrevrange(key, count=1)

        last = [0] * len(names)
        for (i, _), newest in zip(keys, execute(self._r, build), strict=True):
            if newest:
                last[i] = max(last[i], int(_text(newest[0][0]).partition("-")[0]))
        return last
