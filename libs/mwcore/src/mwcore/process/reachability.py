"""Whether this process reaches Redis and the broker, asked every second, and said.

A worker cut off from Redis but not from the broker keeps its group membership (its
heartbeats come from librdkafka's thread) while every commit waits; one cut off from
the broker but not from Redis loses its intervals to another worker and goes on
writing to Redis until the tokens fence it. Neither is a crash, so neither shows in
the exit code or the loop's liveness. A ``Probe`` thread asks each dependency, along
the very addresses the process uses (through the same proxies, listeners and
credentials), with a bounded wait:

- Redis: ``PING`` on a connection of its own;
- the broker: ``DescribeCluster`` through an admin client of its own (no topic
  named, none created).

What an operator sees:

- a log line when a dependency stops answering (``dependency_unreachable``, with the
  address and the error), again every ``REPEAT_S`` while it lasts (with how long),
  and one when it answers again (``dependency_reachable``, with how long it was out);
- ``/healthz``: 503 with ``cannot reach Redis at 127.0.0.1:6379 for 4 s: ...``, once
  it has lasted ``HEALTH_GRACE_S`` (a restart the clients ride out does not count);
- metrics: ``mw_dependency_up{dependency}`` (1 or 0), ``mw_dependency_outages_total``,
  ``mw_dependency_rtt_seconds`` (the last probe's round trip: a slow link shows there).

The probe changes nothing in how the process works: its clients retry and time out as
before. A worker whose step fails after its retries stops with one line saying what it
lost (``bootstrap.main``, exit code 75), and its supervisor starts it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import structlog
from prometheus_client.core import Metric

from mwcore.errors import shown_url
from mwcore.process.metrics import counter, gauge
from mwcore.store.client import pinger
from mwcore.transport.transient import cluster_asker

log = structlog.get_logger("mwcore.process.reachability")

REPEAT_S = 10.0  # while unreachable, said again this often
# /healthz says so once it has lasted this long: a restart of a second or two (which the
# clients ride out) does not turn a process unhealthy, nor is it said after it is over
HEALTH_GRACE_S = 3.0
PRODUCTS = {"redis": "Redis", "broker": "the Kafka broker"}


@dataclass
class Dependency:
    name: str  # "redis" or "broker"
    address: str  # as shown (no password)
    ask: Callable[[float], None]  # raises when it does not answer within the seconds given
    down_since: float | None = None  # monotonic
    error: str = ""
    said_at: float = 0.0
    outages: int = 0
    rtt_s: float = 0.0

    def problem(self, now: float) -> str | None:
        if self.down_since is None or now - self.down_since < HEALTH_GRACE_S:
            return None
        return (
            f"cannot reach {PRODUCTS.get(self.name, self.name)} at {self.address} "
            f"for {now - self.down_since:.0f} s: {self.error}"
        )


@dataclass
class Probe:
    """Asks each dependency every ``every_s`` (each ask bounded by ``timeout_s``)."""

    process: str
    dependencies: list[Dependency]
    every_s: float = 1.0
    timeout_s: float = 2.0
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Probe:
        """A daemon thread per dependency (one that does not answer delays no other)."""
        for dep in self.dependencies:
            threading.Thread(target=self._run, args=(dep,), name=f"reach-{dep.name}", daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()

    def _run(self, dep: Dependency) -> None:
        while not self.stopping.is_set():
            began = time.monotonic()
            self.ask(dep)
            self.stopping.wait(max(0.0, self.every_s - (time.monotonic() - began)))

    def ask(self, dep: Dependency) -> None:
        """One probe of ``dep``; its state, logged on a change."""
        t0 = time.monotonic()
        try:
            dep.ask(self.timeout_s)
        except Exception as exc:
            self._failed(dep, t0, _text(exc, self.timeout_s))
        else:
            self._answered(dep, t0, time.monotonic() - t0)

    def _failed(self, dep: Dependency, t0: float, error: str) -> None:
        with self.lock:
            now = time.monotonic()
            first = dep.down_since is None
            if first:
                dep.down_since, dep.outages = t0, dep.outages + 1
            dep.error = error
            if first or now - dep.said_at >= REPEAT_S:
                dep.said_at = now
                log.warning(
                    "dependency_unreachable",
                    process=self.process,
                    dependency=dep.name,
                    address=dep.address,
                    for_s=round(now - (dep.down_since or t0), 1),
                    error=error,
                )

    def _answered(self, dep: Dependency, t0: float, rtt_s: float) -> None:
        with self.lock:
            dep.rtt_s = rtt_s
            if dep.down_since is not None:
                log.info(
                    "dependency_reachable",
                    process=self.process,
                    dependency=dep.name,
                    address=dep.address,
                    after_s=round(t0 - dep.down_since, 1),
                )
                dep.down_since, dep.error = None, ""

    def problem(self) -> str | None:
        """The first dependency not reached (``/healthz``), or None."""
        with self.lock:
            now = time.monotonic()
            return next((p for d in self.dependencies if (p := d.problem(now))), None)

    def families(self) -> Iterable[Metric]:
        with self.lock:
            for d in self.dependencies:
                labels = {"dependency": d.name}
                up = 0.0 if d.down_since is not None else 1.0
                yield gauge("mw_dependency_up", "1 while the last probe was answered, else 0", labels, up)
                yield counter("mw_dependency_outages", "Times it stopped answering", labels, d.outages)
                rtt = "The last answered probe's round trip"
                yield gauge("mw_dependency_rtt_seconds", rtt, labels, d.rtt_s)


def redis_dependency(url: str) -> Dependency:
    return Dependency("redis", shown_url(url), pinger(url))


def broker_dependency(bootstrap: str) -> Dependency:
    return Dependency("broker", bootstrap, cluster_asker(bootstrap))


def _text(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError) or not str(exc):
        return f"no answer within {timeout_s:g} s"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
