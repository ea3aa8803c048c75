"""Where the machine's CPU went during a bench's timed span, per record: each named
process (the worker, the broker, Redis, the authority), the rest of the machine, and
what stayed idle. On this two-core machine the worker shares its cores with the broker
and Redis, so its rate is bounded by what they leave it as much as by its own cost.

``CpuSplit({"worker": pid, ...})``, ``start()`` and ``stop()`` around the span, then
``per_record(records)``: microseconds of CPU per record for each name, ``"other"``
(everything else that ran), ``"idle"``, ``"iowait"`` (idle with I/O outstanding: a
disk's fsync, say), ``"steal"`` (the hypervisor ran someone else), and ``"machine"``
(every core's time over the span: the sum of the others). Linux ``/proc`` only; a
process gone by ``stop`` counts as 0.
"""

from __future__ import annotations

import os
from pathlib import Path

from mwcore.tools.stack.localstack import LocalStack

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, all threads) a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_seconds() -> tuple[float, float, float, float]:
    """(all cores' time, idle, waiting for I/O, stolen by the hypervisor) since boot, from
    ``/proc/stat``'s first line."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is already in user)
    return sum(ticks[:8]) / _TICK, ticks[3] / _TICK, ticks[4] / _TICK, ticks[7] / _TICK


def stack_pids(stack: LocalStack) -> dict[str, int | None]:
    """The local stack's broker and Redis processes (None where it has none: a cluster)."""
    procs = {"broker": getattr(stack.broker, "proc", None), "redis": getattr(stack.redis, "proc", None)}
    return {name: None if proc is None else proc.pid for name, proc in procs.items()}


class CpuSplit:
    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid is not None}
        self._start: dict[str, float] = {}
        self._end: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        total, idle, iowait, steal = machine_seconds()
        out = {"machine": total, "idle": idle, "iowait": iowait, "steal": steal}
        for name, pid in self.pids.items():
            out[name] = cpu_seconds(pid) or 0.0
        return out

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> None:
        self._end = self._read()

    def per_record(self, records: int) -> dict[str, float]:
        if not self._start or not self._end or records <= 0:
            return {}
        spent = {name: max(0.0, self._end[name] - self._start.get(name, 0.0)) for name in self._end}
        named = sum(v for k, v in spent.items() if k != "machine")
        spent["other"] = max(0.0, spent["machine"] - named)
        return {name: round(1e6 * v / records, 2) for name, v in spent.items()}
