"""``mw retire COMPUTATION``: take a computation whose workers are gone for good out of
the watermark authority's topology, so that its consumers' watermarks stop waiting
for it.

What it does, in one Redis script (``store/retire_log.py``: atomic with respect to
every declaration; the report streams' newest entries are read just before it, as
they live in the intervals' hash slots):

1. **Liveness.** The computation's last sign of life is the later of the newest
   entry on its report stream (a report, every 50 ms from each interval owner, or a
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
from typing import Any, Literal, Protocol

from mwcore.errors import ConfigError, RefusedError
from mwcore.watermarks.report_format import NodeSpec

QUIET_S = 15.0  # no sign of life for this long: the workers are gone
MIN_QUIET_S = 12.0  # workers declare themselves every 10 s (runtime/watermark_reporter.py)


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


@dataclass(frozen=True)
class Check:
    """What the liveness rule found (``RetireLog.check``): ``ok`` (``now_ms``, and
    ``ago_ms`` since the most recent sign of life of any of them), ``unknown`` (``name``
    left the topology), or ``live`` (``name`` ``reported`` or ``declared`` ``ago_ms`` ago)."""

    status: Literal["ok", "unknown", "live"]
    name: str = ""
    ago_ms: int = 0
    what: str = ""
    now_ms: int = 0


class RetireLog(Protocol):
    """The topology and retirements, and the retirement itself (``store.retirements``:
    one Redis script, atomic with respect to every declaration and report)."""

    def declared(self) -> dict[str, NodeSpec]: ...
    def retired(self, name: str) -> tuple[Retirement, int] | None:
        """Its retirement, and the store's clock now (ms); None if not retired."""
        ...

    def check(self, names: list[str], quiet_ms: int, ends: list[dict[str, int]] | None) -> Check:
        """The liveness rule for ``names``; with ``ends`` (one per name), retire them if it passes."""
        ...


def rekey_stages(name: str, topology: dict[str, NodeSpec]) -> list[str]:
    """The rekey stages a worker of ``name`` runs beside it (``runtime/rekey.py``)."""
    prefix = f"{name}-rekey-".replace(".", "-")
    return sorted(n for n in topology if n.startswith(prefix) and n != name)


EndsOf = Callable[[NodeSpec], dict[str, int]]  # "topic:partition" -> end offset of its outputs


class Retirer:
    def __init__(self, log: RetireLog, ends_of: EndsOf, namespace: str, quiet_s: float = QUIET_S) -> None:
        if quiet_s < MIN_QUIET_S:
            raise ConfigError(
                f"--quiet-s {quiet_s:g} is too short: workers declare themselves every 10 s, "
                f"so a silence under {MIN_QUIET_S:g} s does not show they are gone"
            )
        self._log = log
        self._ends_of = ends_of
        self._ns = namespace
        self._quiet_ms = int(quiet_s * 1000)

    def _check(self, names: list[str], ends: list[dict[str, int]] | None) -> Check:
        found = self._log.check(names, self._quiet_ms, ends)
        if found.status == "unknown":
            raise RefusedError(f"{found.name} left the topology meanwhile (retired by someone else?)")
        if found.status == "live":
            ago = found.ago_ms / 1000
            wait = max(0.1, self._quiet_ms / 1000 - ago)
            verb = "reported" if found.what == "reported" else "declared themselves"
            raise RefusedError(
                f"workers of {found.name} {verb} {ago:.1f} s ago; stop them first (or wait {wait:.1f} s)"
            )
        return found

    def retire(self, name: str) -> Outcome:
        topology = self._log.declared()
        spec = topology.get(name)
        if spec is None:
            before = self._log.retired(name)
            if before is not None:
                return Outcome(name, self._ns, already=before[0], now_ms=before[1])
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
        self._check(names, None)  # refuse before asking Kafka
        done = self._check(names, [self._ends_of(topology[n]) for n in names])
        outputs = {t for n in names for t in topology[n].outputs}
        consumers = sorted(
            n
            for n, s in topology.items()
            if n not in names and s.kind == "computation" and outputs & set(s.inputs)
        )
        return Outcome(
            name, self._ns, tuple(names), tuple(consumers), quiet_ms=done.ago_ms, now_ms=done.now_ms
        )
