"""What runs beside the fault suite's pipeline (``bench/chaos.py``): the injector feeding
it (``Feeder``), the sampler of every interval's owner and commits (``Monitor``), and
checks that the pipeline has drained."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from mwcore.api import ids
from mwcore.api.clock import MAX_WATERMARK
from mwcore.injector.injector import Injector
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import is_cluster_node
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import topic_name
from testbed import wire
from testbed.chaos.check import COMPUTATION
from testbed.chaos.pipeline import ChaosCount

INTERVALS = ChaosCount.partitions
KEYS = 500
DISORDER_MS = 2000  # input timestamps up to this far behind the clock
PROMISE_LAG_MS = 3000  # the injector's watermark trails the clock by this much


def connect(url: str, timeout: float) -> Any:
    """A client with short timeouts (the actors ride out outages), of one Redis or of a
    Redis Cluster (``--redis-cluster``)."""
    single = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    if not is_cluster_node(single):
        return single
    single.close()
    return RedisCluster.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


class Feeder(threading.Thread):
    """The injector: out-of-order records at ``rate``, some re-sent, some malformed; its
    watermark trails the clock. Rides out Redis and broker restarts."""

    def __init__(self, stack: LocalStack, registry: SchemaRegistry, namespace: str, rate: int, seed: int):
        super().__init__(daemon=True, name="feeder")
        self.inj = Injector(
            bootstrap=stack.bootstrap,
            client=connect(stack.redis_url, 2),
            registry=registry,
            name="chaos_injector",
            outputs={"chaos_in": "mw.examples.Number"},
            namespace=namespace,
            partitions=INTERVALS,
            report_interval_ms=100,
            **wire.injector_args(stack),
        )
        self.encode = wire.serde(
            stack, registry, topic_name(namespace, "chaos_in"), "mw.examples.Number"
        ).encode
        self.rate = rate
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.malformed: set[bytes] = set()
        self.sent = 0
        self.errors = 0
        self.error: BaseException | None = None

    def _guard(self, call: Any, *args: Any) -> None:
        try:
            call(*args)
        except (redis.RedisError, OSError):
            self.errors += 1  # Redis restarting: the next report carries it
            time.sleep(0.05)

    def run(self) -> None:
        try:
            self.inj.start()
            recent: list[tuple[str, bytes, int, bytes]] = []
            start, i = time.monotonic(), 0
            while not self.stopping.is_set():
                due = int((time.monotonic() - start) * self.rate)
                while i < due:
                    i += 1
                    now = time.time_ns() // 1_000_000
                    rng = self.rng
                    if recent and rng.random() < 0.01:  # a re-send: same id, key, value, time
                        key, data, ts, rid = rng.choice(recent)
                    elif rng.random() < 0.001:
                        key, data, ts, rid = (
                            f"key-{rng.randrange(KEYS)}",
                            b"\x00not avro",
                            now,
                            ids.random_id(),
                        )
                        self.malformed.add(rid)
                    else:
                        key = f"key-{min(int(rng.paretovariate(1.1)) - 1, KEYS - 1)}"
                        data = self.encode({"n": rng.randint(1, 100)})
                        ts, rid = now - rng.randrange(DISORDER_MS), ids.random_id()
                        recent.append((key, data, ts, rid))
                        if len(recent) > 200:
                            recent.pop(0)
                    self._guard(self.inj.send_encoded, "chaos_in", key.encode(), data, ts, rid)
                    self.sent += 1
                self._guard(self.inj.advance, time.time_ns() // 1_000_000 - PROMISE_LAG_MS)
                time.sleep(0.002)
            deadline = time.monotonic() + 120
            while True:  # the end: every window may fire
                try:
                    self.inj.advance(MAX_WATERMARK)
                    self.inj.flush()
                    break
                except (redis.RedisError, OSError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        except BaseException as exc:
            self.error = exc


@dataclass
class Sample:
    t: float
    owner: str
    commits: int


class Monitor(threading.Thread):
    """Samples every interval's owner and commit count in Redis every 100 ms."""

    def __init__(self, redis_url: str, namespace: str) -> None:
        super().__init__(daemon=True, name="monitor")
        self.r = connect(redis_url, 1)
        self.keys = [f"mw:{{{namespace}/{COMPUTATION}/{i}}}:meta" for i in range(INTERVALS)]
        self.samples: list[list[Sample]] = [[] for _ in range(INTERVALS)]
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            try:
                pipe = self.r.pipeline(transaction=False)
                for k in self.keys:
                    pipe.hmget(k, "owner", "commits")
                rows = pipe.execute()
            except (redis.RedisError, OSError):
                continue
            now = time.monotonic()
            for i, (owner, commits) in enumerate(rows):
                self.samples[i].append(Sample(now, (owner or b"").decode(), int(commits or 0)))

    def at(self, i: int, t: float) -> Sample | None:
        before = [s for s in self.samples[i] if s.t <= t]
        return before[-1] if before else None

    def owned_by(self, owner: str, t: float) -> list[int]:
        return [i for i in range(INTERVALS) if (s := self.at(i, t)) is not None and s.owner == owner]

    def taken_over(self, i: int, t0: float, owner: str) -> float | None:
        """Seconds from ``t0`` until interval ``i`` committed under another owner."""
        base = self.at(i, t0)
        for s in self.samples[i]:
            if s.t > t0 and s.owner not in ("", owner) and base is not None and s.commits > base.commits:
                return s.t - t0
        return None

    def progressed(self, i: int, t0: float) -> float | None:
        """Seconds from ``t0`` until interval ``i`` committed again."""
        base = self.at(i, t0)
        for s in self.samples[i]:
            if s.t > t0 and base is not None and s.commits > base.commits:
                return s.t - t0
        return None

    def longest_stall(self, t0: float, t1: float) -> float:
        """The longest time in [t0, t1] any interval went without a commit."""
        worst = 0.0
        for series in self.samples:
            last = t0
            for s, prev in zip(series[1:], series, strict=False):
                if s.t < t0 or prev.t > t1:
                    continue
                if s.commits != prev.commits:
                    worst = max(worst, min(s.t, t1) - last)
                    last = s.t
            worst = max(worst, t1 - last)
        return worst


def drained(stack: LocalStack, namespace: str, ends: dict[tuple[str, int], int]) -> bool:
    """Every input position committed, nothing pending, no timer left."""
    r = connect(stack.redis_url, 2)
    try:
        for (topic, p), end in ends.items():
            base = f"mw:{{{namespace}/{COMPUTATION}/{p}}}"
            if int(r.hget(f"{base}:pos", f"{topic}:{p}") or 0) < end:
                return False
            if r.hlen(f"{base}:pending") or r.hlen(f"{base}:timers"):
                return False
        return True
    except (redis.RedisError, OSError):
        return False


def drain_state(stack: LocalStack, namespace: str, ends: dict[tuple[str, int], int]) -> str:
    """What an undrained pipeline still holds, per interval (for the error)."""
    r = connect(stack.redis_url, 2)
    out = []
    for (topic, p), end in sorted(ends.items()):
        base = f"mw:{{{namespace}/{COMPUTATION}/{p}}}"
        pos = int(r.hget(f"{base}:pos", f"{topic}:{p}") or 0)
        owner = (r.hget(f"{base}:meta", "owner") or b"").decode()
        timers = sorted(r.hkeys(f"{base}:timers"))[:2]
        out.append(
            f"[{p}] owner {owner} position {pos}/{end} pending {r.hlen(f'{base}:pending')} "
            f"timers {r.hlen(f'{base}:timers')} {timers}"
        )
    wm = r.get(f"mw:wm:{namespace}:{COMPUTATION}")
    return "; ".join(out) + f"; watermark key {wm!r}"


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)
