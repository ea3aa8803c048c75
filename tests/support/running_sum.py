"""The crash test's pipeline: injector -> running_sum workers (killed often) -> verifier.

The injector writes records out of event-time order and re-sends about 1% of them
with the same id (what an injector that crashes and retries does). The verifier
checks the outputs against the ground truth and returns every violation it finds,
so a negative control can show that turning a mechanism off is caught.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mwcore.api import ids
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics, topic_name
from mwcore.transport.writer import SourceWriter
from testbed import wire
from testbed.procs import ROOT, WorkerProc, wait_until, worker_env
from testbed.topics import read_topic
from testbed.wire import source_writer

COMPUTATION = "mwcore.examples.running_sum:RunningSum"
PARTITIONS = 4


@dataclass(frozen=True)
class InputRecord:
    key: str
    n: int
    ts: int
    id: bytes


def make_inputs(count: int, keys: int, dup_rate: float, seed: int) -> list[InputRecord]:
    """``count`` distinct records (skewed keys, jittered timestamps) plus re-sent copies."""
    rng = random.Random(seed)
    base = 1_700_000_000_000
    distinct = []
    for i in range(count):
        key = f"key-{min(int(rng.paretovariate(1.2)) - 1, keys - 1) if i % 2 else rng.randrange(keys)}"
        ts = base + i + rng.randint(-5_000, 5_000)  # out of order by up to 10 s
        distinct.append(InputRecord(key, rng.randint(1, 100), ts, rng.randbytes(16)))
    out = list(distinct)
    for rec in rng.sample(distinct, int(count * dup_rate)):
        out.insert(rng.randrange(len(out) + 1), rec)  # whichever copy comes first wins
    return out


class Injector(threading.Thread):
    """Writes the inputs at a pace; ``hold_at`` pauses the tail until ``release`` is set."""

    def __init__(
        self,
        writer: SourceWriter,
        records: list[InputRecord],
        rate: float,
        hold_at: int | None = None,
        trickle: float = 200.0,
        headers: Callable[[InputRecord], Sequence[tuple[str, bytes]]] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.headers = headers  # each record's user headers
        self.writer = writer
        self.records = records
        self.rate = rate
        self.hold_at = hold_at if hold_at is not None else len(records)
        self.trickle = trickle
        self.release = threading.Event()
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            start = time.monotonic()
            for i, rec in enumerate(self.records):
                if i < self.hold_at:
                    target = start + i / self.rate
                elif not self.release.is_set():
                    target = time.monotonic() + 1 / self.trickle
                else:
                    target = 0
                delay = target - time.monotonic()
                if delay > 0:
                    self.writer.producer.poll(0)
                    time.sleep(delay)
                own = () if self.headers is None else self.headers(rec)
                self.writer.write(rec.key, {"n": rec.n}, rec.ts, rec.id, own)
                self.written = i + 1
            self.writer.flush()
        except BaseException as exc:
            self.error = exc


@dataclass
class Deployment:
    """Topics, Redis and worker processes of one running_sum pipeline in a namespace."""

    bootstrap: str
    redis_url: str
    namespace: str
    schemas_dir: Path
    log_dir: Path
    schema_registry_url: str | None = None
    worker_env: dict[str, str] = field(default_factory=dict)
    workers: list[WorkerProc] = field(default_factory=list)
    computation: str = COMPUTATION  # module:Class of a computation named running_sum

    @classmethod
    def on(cls, stack: LocalStack, namespace: str, log_dir: Path, **kw: Any) -> Deployment:
        """A deployment on the session's stack with the repository's schemas; ``kw``:
        ``computation``, ``worker_env``."""
        return cls(
            stack.bootstrap,
            stack.redis_url,
            namespace,
            ROOT / "schemas",
            log_dir,
            schema_registry_url=stack.schema_registry_url,
            **kw,
        )

    def __post_init__(self) -> None:
        self.r = connect_redis(self.redis_url)
        self.numbers = topic_name(self.namespace, "numbers")
        ensure_topics(self.bootstrap, {self.numbers: PARTITIONS})

    def env(self) -> dict[str, str]:
        return worker_env(self, self.namespace, MW_LOG_LEVEL="info", **self.worker_env)

    def add_worker(self, name: str) -> WorkerProc:
        # Dynamic membership (tests/test_membership.py covers MW_INSTANCE_ID).
        w = WorkerProc(self.computation, self.env(), self.log_dir, name)
        self.workers.append(w)
        return w

    def feed(self, registry: SchemaRegistry, inputs: list[InputRecord], rate: float) -> Injector:
        """Start writing ``inputs`` to ``numbers`` at ``rate`` a second (its ``writer``
        knows the end offsets once it is done)."""
        writer = source_writer(self, registry, self.numbers, "mw.examples.Number")
        injector = Injector(writer, inputs, rate=rate)
        injector.start()
        return injector

    def key(self, index: int, suffix: str) -> str:
        return f"mw:{{{self.namespace}/running_sum/{index}}}:{suffix}"

    def commits(self) -> list[int]:
        return [int(self.r.hget(self.key(i, "meta"), "commits") or 0) for i in range(PARTITIONS)]

    def caught_up(self, end_offsets: dict[int, int]) -> bool:
        for p in range(PARTITIONS):
            pos = self.r.hget(self.key(p, "pos"), f"{self.numbers}:{p}")
            if int(pos or 0) < end_offsets.get(p, 0):
                return False
            if self.r.hlen(self.key(p, "pending")) or self.r.hlen(self.key(p, "timers")):
                return False
        return True

    def wait_caught_up(self, end_offsets: dict[int, int], timeout: float) -> None:
        wait_until(lambda: self.caught_up(end_offsets), timeout, 0.25, "workers to catch up")

    def state(self) -> dict[str, dict[str, int]]:
        out = {}
        for p in range(PARTITIONS):
            for k, v in self.r.hgetall(self.key(p, "state")).items():
                out[k.decode()] = json.loads(v)
        return out


def verify(
    inputs: list[InputRecord],
    registry: SchemaRegistry,
    deployment: Deployment,
) -> list[str]:
    """Every violation of exactly-once the outputs show (empty when all is well)."""
    distinct = {r.id: r for r in inputs}
    truth_sum: Counter[str] = Counter()
    truth_count: Counter[str] = Counter()
    for r in distinct.values():
        truth_sum[r.key] += r.n
        truth_count[r.key] += 1
    serde = wire.serde(deployment, registry, topic_name(deployment.namespace, "sums"), "mw.examples.Sum")
    problems: list[str] = []

    sums = read_topic(deployment.bootstrap, topic_name(deployment.namespace, "sums"))
    by_id: dict[bytes, bytes] = {}
    conflicting = set()
    for m in sums:
        prev = by_id.setdefault(m.id, m.value)
        if prev != m.value:
            conflicting.add(m.id)
    if conflicting:
        problems.append(f"{len(conflicting)} production ids sent twice with different values")
    expected_ids = {ids.derive(rid, 0) for rid in distinct}
    missing = expected_ids - by_id.keys()
    extra = by_id.keys() - expected_ids
    if missing:
        problems.append(f"{len(missing)} productions lost (no sums record for their input)")
    if extra:
        problems.append(f"{len(extra)} productions not derived from any distinct input (duplicates)")

    counts: dict[str, list[int]] = defaultdict(list)
    final: dict[str, int] = {}
    for value in by_id.values():
        v = serde.decode(value)
        counts[v["key"]].append(v["count"])
        if v["count"] == truth_count[v["key"]]:
            final[v["key"]] = v["total"]
    bad_counts, bad_final = [], []
    for key, n in truth_count.items():
        got = sorted(counts.get(key, []))
        if got != list(range(1, n + 1)):
            bad_counts.append(f"{key} ({len(got)} sums for {n} records)")
        elif final.get(key) != truth_sum[key]:
            bad_final.append(f"{key} ({final.get(key)} != {truth_sum[key]})")
    if bad_counts:
        problems.append(f"{len(bad_counts)} keys' sums counts are not exactly 1..n, e.g. {bad_counts[:3]}")
    if bad_final:
        problems.append(f"{len(bad_final)} keys' final sum differs from the truth, e.g. {bad_final[:3]}")

    state = deployment.state()
    wrong_state = [k for k in truth_sum if state.get(k, {}).get("total") != truth_sum[k]]
    if wrong_state:
        problems.append(f"{len(wrong_state)} keys' state differs from the truth, e.g. {wrong_state[:3]}")

    totals = read_topic(deployment.bootstrap, topic_name(deployment.namespace, "totals"))
    last_total: dict[str, tuple[int, int]] = {}
    for m in totals:
        v = serde.decode(m.value)
        last_total[v["key"]] = max(last_total.get(v["key"], (0, 0)), (v["count"], v["total"]))
    wrong_totals = [k for k in truth_sum if last_total.get(k) != (truth_count[k], truth_sum[k])]
    if wrong_totals:
        problems.append(f"{len(wrong_totals)} keys' last timer total differs, e.g. {wrong_totals[:3]}")
    return problems


def fired_points(path: Path) -> dict[str, int]:
    """How often each fault point fired, as ``MW_FAULT_LOG`` at ``path`` tells."""
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            point = json.loads(line)["point"]
            counts[point] = counts.get(point, 0) + 1
    return counts
