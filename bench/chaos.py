"""The fault suite: a keyed pipeline on the local stack under a seeded schedule of faults.

Run: ``.venv/bin/python bench/chaos.py [--faults 40] [--seed 1] [--scenario mixed|rollback]
[--brokers 3] [--redis-cluster]``
(``rollback``: see ``bench/chaos_rollback.py``).

Three ``mw run`` workers of ``bench/chaos_pipeline.py`` (per-key state, one strong
production per record, event-time windows, wall-time timers; 6 intervals), the
watermark authority, and an injector (in this process) writing out-of-order input at
``--rate`` with 1% of the records re-sent under the same id and 0.1% malformed. While
the input flows, one fault every ``--gap`` seconds, each kind at least once:

- ``worker_kill``: SIGKILL a worker, restart it ``--restart-after`` s later;
- ``worker_restart``: SIGTERM a worker and start it again at once (a rolling restart);
- ``worker_stop``: SIGSTOP a worker past the session timeout, then SIGCONT (a zombie;
  a worker that stopped itself at a fault point, ``MW_FAULTS=...:stop``, is resumed
  the same way);
- ``redis_term`` / ``redis_kill``: restart Redis after SIGTERM / SIGKILL (with
  ``--redis-cluster``: stop the primary of a random interval, wait for its replica to
  take over, start it again: it rejoins as a replica);
- ``authority_kill``: SIGKILL the watermark authority, restart it at once;
- ``broker_kill``: SIGKILL the Kafka broker, restart it (with ``--brokers 3``: SIGKILL
  one of the three, restart it 1 to 5 s later).

Then the input ends, the pipeline drains (every window's and timer's time passes),
and ``bench/chaos_check.py`` checks the outputs and Redis. The last line printed is
JSON: faults by kind, each check's violations, the longest stall of any interval,
takeover and handover times, wall-timer lateness, catch-up time, and ``"verdict":
"exactly_once"`` only when every check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.*, tests.support.*

from bench.chaos_actors import INTERVALS, Feeder, Monitor, connect, drain_state, drained, wait_for
from bench.chaos_check import COMPUTATION, Findings, check
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.kafka_broker import KafkaBroker
from mwcore.tools.stack.kafka_cluster import KafkaCluster
from mwcore.tools.stack.localstack import LocalKafka, LocalRedis, LocalStack, RedisServer
from mwcore.tools.stack.redis_cluster import LocalRedisCluster
from mwcore.transport.topics import end_offsets, topic_name
from tests.support.procs import ROOT, WorkerProc, worker_env

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


def _quantiles(xs: list[float], *qs: float) -> dict[str, float | None]:
    xs = sorted(xs)
    out: dict[str, float | None] = {}
    for q in qs:
        out[f"p{round(q * 100)}"] = round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None
    out["max"] = round(xs[-1], 3) if xs else None
    return out


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
    handover_s: list[float] = field(default_factory=list)
    pending_checks: list[tuple[str, float, str, list[int]]] = field(default_factory=list)
    down_since: dict[str, float] = field(default_factory=dict)  # process name -> when seen down
    stopped_since: dict[str, float] = field(default_factory=dict)  # worker -> when seen stopped
    supervising: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)  # a fault, or a restart
    extra_env: dict[str, str] = field(default_factory=dict)
    supervisor: threading.Thread | None = None

    def env(self) -> dict[str, str]:
        return (
            worker_env(
                self.stack.bootstrap,
                self.stack.redis_url,
                self.namespace,
                MW_WATERMARK="authority",
                MW_LOG_LEVEL="info",
            )
            | self.extra_env
        )

    def start(self, n_workers: int) -> None:
        env = self.env()
        self.authority = WorkerProc("authority", env, self.log_dir, "authority", command=("authority",))
        self.authority.start(MW_AUTHORITY_BLOCK_MS="10")
        for k in range(n_workers):
            self.workers.append(
                WorkerProc("bench.chaos_pipeline:ChaosCount", env, self.log_dir, f"w{k}").start()
            )

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
            if w.alive and _stopped(w.pid):
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
        wait_for(lambda: all(_commits(monitor, i) >= 2 for i in range(INTERVALS)), 90, "a first checkpoint")

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
        with self.lock:
            self._inject(kind, rng, monitor)

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
        windows = [(t, t + d) for (t, _, _), d in zip(self.outages, self.outage_s, strict=True)]
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
        windows += self.affected
        return [
            (float(late), due)
            for late, due in zip(f.timer_lateness_ms, f.timer_due_ms, strict=True)
            if not any(a <= due / 1000 <= b for a, b in windows)
        ]


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments of a run, as ``main`` takes them (for the tests)."""
    return _parser().parse_args(argv)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--scenario",
        choices=("mixed", "rollback"),
        default="mixed",
        help="rollback: Redis loses the tail of its writes (bench/chaos_rollback.py)",
    )
    parser.add_argument("--lag", type=float, default=3.0, help="rollback: seconds of writes the store loses")
    parser.add_argument("--watch", type=float, default=30.0, help="rollback: how long to wait for the stop")
    parser.add_argument("--rate", type=int, default=1000, help="input records per second")
    parser.add_argument("--gap", type=float, default=4.0, help="seconds between faults")
    parser.add_argument(
        "--restart-after", type=float, default=2.0, help="a killed worker restarts after this"
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument(
        "--brokers", type=int, default=1, help="Kafka brokers (3: a broker fault SIGKILLs one of them)"
    )
    parser.add_argument(
        "--redis-cluster",
        action="store_true",
        help="the store: a local Redis Cluster (3 primaries, 3 replicas); a Redis fault: a failover",
    )
    parser.add_argument("--kinds", default=",".join(KINDS), help="fault kinds to draw from")
    parser.add_argument(
        "--worker-env", type=json.loads, default={}, help="JSON of more worker settings (negative controls)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    result = run(_parser().parse_args(argv))
    print(json.dumps(result))
    return 0 if result["verdict"] in ("exactly_once", "stopped_before_second_payload") else 1


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.scenario == "rollback":
        from bench.chaos_rollback import run_rollback

        return run_rollback(args)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    plan = schedule(args.faults, args.seed, kinds)
    rng = random.Random(args.seed)
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    namespace = f"chaos{os.getpid()}"
    log_dir = Path(tempfile.mkdtemp(prefix="mw-chaos-"))
    store: LocalRedis = LocalRedisCluster() if args.redis_cluster else RedisServer(appendfsync="always")
    broker: LocalKafka = KafkaCluster(brokers=args.brokers) if args.brokers > 1 else KafkaBroker()
    with LocalStack(broker=broker, redis=store) as stack:
        run_ = Run(stack, namespace, log_dir, extra_env=args.worker_env)
        feeder = Feeder(stack, registry, namespace, args.rate, args.seed)
        monitor = Monitor(stack.redis_url, namespace)
        try:
            run_.launch(args.workers, args.restart_after, feeder, monitor)
            first_fault = time.monotonic()
            for n, kind in enumerate(plan, 1):
                run_.inject(kind, rng, monitor)
                print(f"fault {n}/{len(plan)}: {kind} {run_.faults[-1][2]}", flush=True)
                time.sleep(args.gap * rng.uniform(0.5, 1.5))
            last_fault = run_.faults[-1][0] if run_.faults else time.monotonic()
            time.sleep(max(0.0, last_fault + 12 - time.monotonic()))  # progress after the last
            input_end = time.monotonic()
            feeder.stopping.set()
            feeder.join(180)
            if feeder.error is not None:
                raise feeder.error
            ends = end_offsets(stack.bootstrap, {topic_name(namespace, "chaos_in"): INTERVALS})
            try:
                wait_for(lambda: drained(stack, namespace, ends), 180, "the pipeline to drain")
            except TimeoutError as exc:
                raise TimeoutError(f"{exc}: {drain_state(stack, namespace, ends)}") from None
            caught_up = time.monotonic()
            time.sleep(0.5)
            monitor.stopping.set()
            monitor.join(5)
            run_.measure(monitor)
            progress = [monitor.progressed(i, last_fault) for i in range(INTERVALS)]
            stall = monitor.longest_stall(first_fault, input_end)
        finally:
            run_.halt(feeder, monitor)
        findings = check(stack.bootstrap, connect(stack.redis_url, 5), registry, namespace, feeder.malformed)
    return _result(args, run_, findings, feeder, stall, progress, caught_up - input_end, log_dir)


def _result(
    args: argparse.Namespace,
    run_: Run,
    f: Findings,
    feeder: Feeder,
    stall: float,
    progress: list[float | None],
    catch_up: float,
    log_dir: Path,
) -> dict[str, Any]:
    outside = run_.lateness_outside_outages(f)
    return {
        "scenario": args.scenario,
        "seed": args.seed,
        "brokers": args.brokers,
        "redis_cluster": args.redis_cluster,
        "records_sent": feeder.sent,
        "malformed_sent": len(feeder.malformed),
        "late_inputs": f.late_inputs,
        "faults": dict(Counter(kind for _, kind, _ in run_.faults)),
        "checks": f.counts,
        "examples": {k: v for k, v in f.examples.items() if v},
        "longest_stall_s": round(stall, 2),
        "progress_after_last_fault_s": round(max((p if p is not None else 1e9) for p in progress), 2),
        "takeover_s": _quantiles(run_.takeover_s, 0.5, 0.95),
        "handover_s": _quantiles(run_.handover_s, 0.5, 0.95),
        "takeover_during_outage_s": _quantiles(run_.takeover_overlapped_s, 0.5),
        "outage_s": _quantiles(run_.outage_s, 0.5),
        "timer_lateness_ms": _quantiles([float(x) for x in f.timer_lateness_ms], 0.5, 0.99),
        "timer_lateness_outside_outages_ms": _quantiles([x for x, _ in outside], 0.5, 0.99),
        # the latest of them (due: wall clock, s) beside the faults (wall clock, s)
        "latest_timers_outside_outages": [
            {"due_s": round(due / 1000, 3), "late_ms": late} for late, due in sorted(outside)[-3:]
        ],
        "fault_times": [
            {"at_s": w, "kind": kind, "target": target}
            for w, (_, kind, target) in zip(run_.fault_walls, run_.faults, strict=True)
        ],
        "catch_up_s": round(catch_up, 2),
        "logs": str(log_dir),
        "verdict": "exactly_once" if f.ok else "violated",
    }


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def _commits(monitor: Monitor, i: int) -> int:
    series = monitor.samples[i]
    return series[-1].commits if series else 0


if __name__ == "__main__":
    sys.exit(main())
