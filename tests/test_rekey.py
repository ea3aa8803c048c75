"""Re-keying: an input keyed by a value field goes through a rekey hop, exactly once.

``numbers`` is keyed by record, ``residue_sum`` keys it by n mod 7. Every residue's
records must land on one partition of the rekey topic (one owner per key), and the
sums must be exact across a SIGKILL of the worker process that runs both the stage
and the computation.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import redis

from mwcore.localstack import LocalStack
from mwcore.serde import AvroSerde, SchemaRegistry
from mwcore.source import SourceWriter
from mwcore.transport import ensure_topics, topic_name
from tests.support.procs import WorkerProc, wait_until, worker_env
from tests.support.topics import read_topic


@pytest.mark.exactly_once
def test_rekeyed_input_has_one_owner_per_key_and_exact_sums(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    rng = random.Random(4)
    numbers = topic_name(namespace, "numbers")
    rekeyed = topic_name(namespace, "residue_sum-rekey-numbers")
    ensure_topics(stack.bootstrap, {numbers: 4})
    writer = SourceWriter(stack.bootstrap, registry, numbers, "mw.examples.Number")
    truth_sum: Counter[str] = Counter()
    truth_count: Counter[str] = Counter()
    env = worker_env(stack.bootstrap, stack.redis_url, namespace)
    worker = WorkerProc("tests.support.computations:ResidueSum", env, tmp_path, "rk").start()
    r = redis.Redis.from_url(stack.redis_url)

    def positions(comp: str, topic: str) -> dict[int, int]:
        return {p: int(r.hget(f"mw:{{{namespace}/{comp}/{p}}}:pos", f"{topic}:{p}") or 0) for p in range(4)}

    for i in range(20_000):
        n = rng.randint(0, 1000)
        truth_sum[str(n % 7)] += n
        truth_count[str(n % 7)] += 1
        writer.write(f"record-{i}", {"n": n}, i)
        if i == 10_000:
            writer.flush()
            wait_until(lambda: sum(positions("residue_sum", rekeyed).values()) > 0, 60, what="progress")
            worker.kill()
            worker.start()
    writer.flush()
    ends = writer.end_offsets
    wait_until(
        lambda: all(positions("residue_sum-rekey-numbers", numbers)[p] >= ends.get(p, 0) for p in range(4)),
        120,
        what="the rekey stage to catch up",
    )
    staged = read_topic(stack.bootstrap, rekeyed)
    staged_ends: dict[int, int] = defaultdict(int)
    partitions_of: dict[bytes | None, set[int]] = defaultdict(set)
    for m in staged:
        staged_ends[m.partition] = max(staged_ends[m.partition], m.offset + 1)
        partitions_of[m.key].add(m.partition)
    assert all(len(ps) == 1 for ps in partitions_of.values()), "a key spans partitions"
    wait_until(
        lambda: all(positions("residue_sum", rekeyed)[p] >= staged_ends[p] for p in staged_ends),
        120,
        what="the computation to catch up",
    )
    worker.terminate()

    state = {}
    for p in range(4):
        for k, v in r.hgetall(f"mw:{{{namespace}/residue_sum/{p}}}:state").items():
            state[k.decode()] = json.loads(v)
    assert {k: (v["total"], v["count"]) for k, v in state.items()} == {
        k: (truth_sum[k], truth_count[k]) for k in truth_sum
    }
    serde = AvroSerde(registry, "mw.examples.Sum")
    counts: dict[str, set[int]] = defaultdict(set)
    for m in {m.id: m for m in read_topic(stack.bootstrap, topic_name(namespace, "residue_sums"))}.values():
        v = serde.decode(m.value)
        counts[v["key"]].add(v["count"])
    assert {k: counts[k] for k in truth_count} == {k: set(range(1, n + 1)) for k, n in truth_count.items()}
