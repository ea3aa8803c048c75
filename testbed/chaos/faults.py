"""A keyed pipeline on the local stack under faults (``Run``): the authority and the
workers of ``pipeline.py`` started and supervised (restarted when they die), the
faults injected, takeovers and hand-overs measured. Used by the mixed scenario
(``mixed.py``) and the rollback scenario (``rollback.py``)."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mwcore.tools.stack.kafka_cluster import KafkaCluster
from mwcore.tools.stack.localstack import LocalStack
from mwcore.tools.stack.redis_cluster import LocalRedisCluster
from testbed.chaos.actors import INTERVALS, Feeder, Monitor, wait_for
from testbed.chaos.check import COMPUTATION, Findings
from testbed.chaos.links import Links
from testbed.chaos.network import NETWORK_KINDS, play
from testbed.procs import WorkerProc, worker_env

KINDS = (
    "worker_kill",
    "worker_restart",
    "worker_stop",
    "redis_term",
    "redis_kill",
    "authority_kill",
    "broker_kill",
)
SESSION_TIMEOUT_S = 1.5  # the kit's consumer session timeout (MW_SESSION_TIMEOUT_MS)


def schedule(n: int, seed: int, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """``n`` fault kinds: every kind once (in a seeded order) first, then seeded picks."""
    rng = random.Random(seed)
    first = list(kinds)
    rng.shuffle(first)
    return (first + [rng.choice(kinds) for _ in range(max(0, n - len(kinds)))])[:n]


@dataclass
class Run:
    stack: LocalStack
    namespace: str
    log_dir: Path
    workers: list[WorkerProc] = field(default_factory=list)
    authority: WorkerProc | None = None
    faults: list[tuple[float, str, str]] = field(default_factory=list)  # (t, kind, target)
    # broker or Redis down: (t, wall t, t when it answered again)
    outages: list[tuple[float, float, float]] = field(default_factory=list)
    outage_s: list[float] = field(default_factory=list)  # each: until every interval committed after
    takeover_overlapped_s: list[float] = field(default_factory=list)  # a takeover during an outage
    fault_walls: list[float] = field(default_factory=list)  # when each fault began (wall clock, s)
    affected: list[tuple[float, float]] = field(default_factory=list)  # takeovers hit by an outage (wall)
    takeover_s: list[float] = field(default_factory=list)
    # each link fault: from its heal until every interval committed
    recovery_s: list[float] = field(default_factory=list)
    handover_s: list[float] = field(default_factory=list)
    pending_checks: list[tuple[str, float, str, list[int]]] = field(default_factory=list)
    down_since: dict[str, float] = field(default_factory=dict)  # process name -> when seen down
    stopped_since: dict[str, float] = field(default_factory=dict)  # worker -> when seen stopped
    supervising: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)  # a fault, or a restart
    extra_env: dict[str, str] = field(default_factory=dict)
    supervisor: threading.Thread | None = None
    links: Links | None = None  # --network: each process's own proxies
    fault_seconds: tuple[float, float] | None = None  # --fault-seconds
    partition: str = "either"  # --partition
    # network faults: (t, wall t, t healed)
    link_faults: list[tuple[float, float, float]] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)  # when each fault's inject returned (healed)
    computation: str = "testbed.chaos.pipeline:ChaosCount"  # --delivery transactional: its variant

    def env(self, slot: str) -> dict[str, str]:
        env = worker_env(self.stack, self.namespace, MW_WATERMARK="authority", MW_LOG_LEVEL="info")
        if self.links is not None:
            env |= self.links.env(slot, self.stack.redis_url)
        return env | self.extra_env

    def start(self, n_workers: int) -> None:
        authority = self.env("authority")
        self.authority = WorkerProc("authority", authority, self.log_dir, "authority", command=("authority",))
        self.authority.start(MW_AUTHORITY_BLOCK_MS="10")
        for k in range(n_workers):
            env = self.env(f"w{k}")
            self.workers.append(WorkerProc(self.computation, env, self.log_dir, f"w{k}").start())

    def supervise(self, restart_after: float) -> None:
        """What a supervisor (compose's restart policy, systemd) does: start again a
        process that exited or was killed, ``restart_after`` s after it was seen down
        (a process that stops at start because a dependency is down exits with code 2
        and is started again like any other)."""
        while not self.supervising.wait(0.25):
            with self.lock:
                self._restart_dead(restart_after)

    def _restart_dead(self, restart_after: float) -> None:
        now = time.monotonic()
        for w in self.workers:  # stopped by its own fault point (MW_FAULTS ...:stop): a zombie
            if w.alive and stopped(w.pid):
                since = self.stopped_since.setdefault(w.name, now)
                if now - since >= SESSION_TIMEOUT_S + 2:
                    del self.stopped_since[w.name]
                    w.resume()
        for p in [*self.workers, self.authority]:
            if p is None or p.alive:
                continue
            since = self.down_since.setdefault(p.name, now)
            if now - since >= restart_after:
                del self.down_since[p.name]
                p.start(MW_AUTHORITY_BLOCK_MS="10") if p is self.authority else p.start()

    def launch(self, n_workers: int, restart_after: float, feeder: Feeder, monitor: Monitor) -> None:
        """Start the authority and the workers, their supervisor, the feeder and the
        monitor; return once every interval has committed twice."""
        self.start(n_workers)
        self.supervisor = threading.Thread(target=self.supervise, args=(restart_after,), daemon=True)
        self.supervisor.start()
        feeder.start()
        monitor.start()
        wait_for(lambda: all(commits(monitor, i) >= 2 for i in range(INTERVALS)), 90, "a first checkpoint")
        if self.links is not None:
            # a network fault falls on a settled group: each worker owns intervals and
            # commits them (a partition drawn while the second worker still joined cut
            # one that was acquiring intervals, with no batch of its own in flight)
            wait_for(lambda: settled(monitor, min(n_workers, INTERVALS)), 90, "every worker owning intervals")

    def halt(self, feeder: Feeder, monitor: Monitor) -> None:
        """Stop everything ``launch`` started."""
        self.stop()
        if self.supervisor is not None and self.supervisor.is_alive():
            self.supervisor.join(5)
        feeder.stopping.set()
        monitor.stopping.set()

    def stop(self) -> None:
        self.supervising.set()
        with self.lock:
            for w in self.workers:
                w.terminate(30)
            if self.authority is not None:
                self.authority.terminate(10)

    def inject(self, kind: str, rng: random.Random, monitor: Monitor) -> None:
        if kind in NETWORK_KINDS:  # not under the lock: the supervisor restarts meanwhile
            assert self.links is not None, "network faults need the links (--network)"
            wall0 = time.time()
            workers = [w.name for w in self.workers]
            played = play(kind, rng, self.links, workers, self.fault_seconds, self.partition)
            self.link_faults.append((played.began, wall0, played.healed))
            self.faults.append((played.began, kind, played.target))
            self.fault_walls.append(round(wall0, 3))
        else:
            with self.lock:
                self._inject(kind, rng, monitor)
        self.ends.append(time.monotonic())

    def _inject(self, kind: str, rng: random.Random, monitor: Monitor) -> None:
        t0 = time.monotonic()
        target = ""
        if kind.startswith("worker_"):
            live = [w for w in self.workers if w.alive]
            w = rng.choice(live)
            target = f"{w.name}-{w.starts}"
            owned = monitor.owned_by(target, t0)
            if kind == "worker_kill":
                w.kill()
                self.pending_checks.append(("takeover", t0, target, owned))
                self.down_since[w.name] = t0  # the supervisor restarts it
            elif kind == "worker_restart":
                w.terminate(30)
                self.pending_checks.append(("handover", t0, target, owned))
                w.start()
            else:
                w.pause()
                time.sleep(SESSION_TIMEOUT_S + 2)
                w.resume()
        elif kind in ("redis_term", "redis_kill") and isinstance(self.stack.redis, LocalRedisCluster):
            # A cluster: the primary of a random interval goes down, its replica takes
            # over, and the old primary comes back as a replica.
            cluster = self.stack.redis
            key = f"mw:{{{self.namespace}/{COMPUTATION}/{rng.randrange(INTERVALS)}}}:token"
            node = cluster.primary_of(key)
            target = f"redis:{node.port}"
            wall0 = time.time()
            (node.stop if kind == "redis_term" else node.kill)()
            wait_for(lambda: cluster.primary_of(key) is not node, 60, "the failover")
            self.outages.append((t0, wall0, time.monotonic()))
            node.start()
            cluster.wait_ok()
        elif kind in ("redis_term", "redis_kill"):
            target = "redis"
            wall0 = time.time()
            (self.stack.redis.stop if kind == "redis_term" else self.stack.redis.kill)()
            self.stack.redis.start()
            self.outages.append((t0, wall0, time.monotonic()))
        elif kind == "authority_kill":
            target = "authority"
            assert self.authority is not None
            self.authority.kill()
            self.authority.start(MW_AUTHORITY_BLOCK_MS="10")
        elif kind == "broker_kill" and isinstance(self.stack.broker, KafkaCluster):
            # One of the brokers: the others lead its partitions meanwhile (no outage).
            index = rng.randrange(len(self.stack.broker.nodes))
            target = f"broker:{index + 1}"
            self.stack.broker.kill(index)
            time.sleep(rng.uniform(1, 5))
            self.stack.broker.start_node(index)
        elif kind == "broker_kill":
            target = "broker"
            wall0 = time.time()
            self.stack.broker.kill()
            self.stack.broker.start()
            self.outages.append((t0, wall0, time.monotonic()))
        self.faults.append((t0, kind, target))
        self.fault_walls.append(round(time.time() - (time.monotonic() - t0), 3))

    def measure(self, monitor: Monitor) -> None:
        """Takeover and handover times. One that overlaps an outage of the broker or
        Redis (nothing moves until it is back) is counted apart: it measures the outage."""
        for t0, _, up in self.outages:
            back = [monitor.progressed(i, up) for i in range(INTERVALS)]
            self.outage_s.append(up - t0 + max((b if b is not None else 1e9) for b in back))
        for _, _, healed in self.link_faults:
            back = [monitor.progressed(i, healed) for i in range(INTERVALS)]
            self.recovery_s.append(max((b if b is not None else 1e9) for b in back))
        windows = [(t, t + d) for (t, _, _), d in zip(self.outages, self.outage_s, strict=True)]
        windows += [(t, up + r) for (t, _, up), r in zip(self.link_faults, self.recovery_s, strict=True)]
        for what, t0, target, owned in self.pending_checks:
            if not owned:
                continue  # it held nothing (e.g. restarted again before it was assigned)
            times = [monitor.taken_over(i, t0, target) for i in owned]
            slowest = max((t for t in times if t is not None), default=None)
            if None in times or slowest is None:
                slowest = 1e9  # never taken over while measured (JSON has no infinity)
            overlapped = any(a <= t0 + slowest and t0 <= b for a, b in windows)
            if overlapped:
                self.takeover_overlapped_s.append(slowest)
                # its intervals' timers wait for the outage too
                wall0 = time.time() - (time.monotonic() - t0)
                self.affected.append((wall0 - 1, wall0 + min(slowest, 1e6)))
            else:
                (self.takeover_s if what == "takeover" else self.handover_s).append(slowest)

    def lateness_outside_outages(self, f: Findings) -> list[tuple[float, int]]:
        """(lateness, due) of the wall timers due outside every outage of the broker or
        Redis (from 1 s before it: a timer just fired may have to fire again after it)
        and every takeover an outage overlapped."""
        windows = [(w - 1, w + d) for (_, w, _), d in zip(self.outages, self.outage_s, strict=True)]
        windows += [
            (w - 1, w + (up - t) + r) for (t, w, up), r in zip(self.link_faults, self.recovery_s, strict=True)
        ]
        windows += self.affected
        return [
            (float(late), due)
            for late, due in zip(f.timer_lateness_ms, f.timer_due_ms, strict=True)
            if not any(a <= due / 1000 <= b for a, b in windows)
        ]


def stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def settled(monitor: Monitor, owners: int, commits_each: int = 2) -> bool:
    """``owners`` distinct owners among the intervals, each interval committed
    ``commits_each`` times under its present owner."""
    series_all = [list(series) for series in monitor.samples]
    if not all(series_all) or len({series[-1].owner for series in series_all}) < owners:
        return False
    for series in series_all:
        last = series[-1]
        first = last
        for s in reversed(series):
            if s.owner != last.owner:
                break
            first = s
        if last.commits - first.commits < commits_each:
            return False
    return True


def commits(monitor: Monitor, i: int) -> int:
    series = monitor.samples[i]
    return series[-1].commits if series else 0
