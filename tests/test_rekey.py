"""Re-keying: an input keyed by a value field goes through a rekey hop, exactly once.

``numbers`` is keyed by record, ``residue_sum`` keys it by n mod 7. Every residue's
records must land on one partition of the rekey topic (one owner per key), and the
sums must be exact across a SIGKILL of the worker process that runs both the stage
and the computation.

Negative control: with the stage passing records on under their own keys
(``MW_UNSAFE_REKEY_KEEP_KEY``), the same check finds residues spread over partitions
and their sums wrong.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics, topic_name
from testbed import wire
from testbed.procs import WorkerProc, wait_until, worker_env
from testbed.topics import Msg, read_topic
from testbed.wire import source_writer
from tests.support.computations import residue_of


def run_rekeyed(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, **env: str
) -> list[str]:
    """20,000 records keyed by record through ``residue_sum`` (keyed by n mod 7), the
    worker SIGKILLed half way; returns every problem ``check_rekeyed`` finds."""
    rng = random.Random(4)
    numbers = topic_name(namespace, "numbers")
    rekeyed = topic_name(namespace, "residue_sum-rekey-numbers")
    ensure_topics(stack.bootstrap, {numbers: 4})
    writer = source_writer(stack, registry, numbers, "mw.examples.Number")
    truth_sum: Counter[str] = Counter()
    truth_count: Counter[str] = Counter()
    worker = WorkerProc(
        "tests.support.computations:ResidueSum",
        worker_env(stack, namespace, **env),
        tmp_path,
        "rk",
    ).start()
    r = connect_redis(stack.redis_url)

    def positions(comp: str, topic: str) -> dict[int, int]:
        return {p: int(r.hget(f"mw:{{{namespace}/{comp}/{p}}}:pos", f"{topic}:{p}") or 0) for p in range(4)}

    try:
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
            lambda: all(
                positions("residue_sum-rekey-numbers", numbers)[p] >= ends.get(p, 0) for p in range(4)
            ),
            120,
            what="the rekey stage to catch up",
        )
        staged = read_topic(stack.bootstrap, rekeyed)
        staged_ends: dict[int, int] = defaultdict(int)
        for m in staged:
            staged_ends[m.partition] = max(staged_ends[m.partition], m.offset + 1)
        wait_until(
            lambda: all(positions("residue_sum", rekeyed)[p] >= staged_ends[p] for p in staged_ends),
            120,
            what="the computation to catch up",
        )
    finally:
        worker.terminate()

    state = {}
    for p in range(4):
        for k, v in r.hgetall(f"mw:{{{namespace}/residue_sum/{p}}}:state").items():
            state[k.decode()] = json.loads(v)
    sums = read_topic(stack.bootstrap, topic_name(namespace, "residue_sums"))
    serdes = (
        wire.serde(stack, registry, rekeyed, "mw.examples.Number"),
        wire.serde(stack, registry, topic_name(namespace, "residue_sums"), "mw.examples.Sum"),
    )
    return check_rekeyed(serdes, staged, state, sums, truth_sum, truth_count)


def check_rekeyed(
    serdes: tuple[AvroSerde, AvroSerde],
    staged: list[Msg],
    state: dict[str, dict[str, int]],
    sums: list[Msg],
    truth_sum: Counter[str],
    truth_count: Counter[str],
) -> list[str]:
    """Every way the rekey topic, the state and the sums differ from "each residue's
    records on one partition of the rekey topic (one owner), its state and its sums
    exact" (empty when all is well)."""
    problems: list[str] = []
    number, serde = serdes  # of the rekey topic and of the sums
    partitions_of: dict[str, set[int]] = defaultdict(set)
    for m in staged:
        partitions_of[residue_of(number.decode(m.value))].add(m.partition)
    spread = {k: sorted(ps) for k, ps in partitions_of.items() if len(ps) > 1}
    if spread:
        problems.append(f"{len(spread)} residues span partitions of the rekey topic: {spread}")
    if set(partitions_of) != set(truth_count):
        problems.append(f"the rekey topic holds residues {sorted(partitions_of)}, not {sorted(truth_count)}")

    got = {k: (v["total"], v["count"]) for k, v in state.items()}
    want = {k: (truth_sum[k], truth_count[k]) for k in truth_sum}
    if got != want:
        wrong = sorted(k for k in want if got.get(k) != want[k])
        problems.append(
            f"state differs from the truth: {len(wrong)} residues wrong (e.g. {wrong[:3]}), "
            f"{len(got.keys() - want.keys())} keys that are no residue"
        )

    counts: dict[str, set[int]] = defaultdict(set)
    for m in {m.id: m for m in sums}.values():
        v = serde.decode(m.value)
        counts[v["key"]].add(v["count"])
    bad_counts = [k for k, n in truth_count.items() if counts.get(k) != set(range(1, n + 1))]
    if bad_counts:
        problems.append(f"{len(bad_counts)} residues' sums counts are not 1..n, e.g. {bad_counts[:3]}")
    return problems


@pytest.mark.exactly_once
def test_rekeyed_input_has_one_owner_per_key_and_exact_sums(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    problems = run_rekeyed(stack, registry, namespace, tmp_path)
    assert problems == [], "\n".join(problems)


@pytest.mark.exactly_once
@pytest.mark.negative_control
def test_negative_control_without_rekeying_a_key_has_several_owners(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same run and check, the rekey stage passing records on under their own keys:
    a residue's records stay spread over the partitions they came from."""
    problems = run_rekeyed(stack, registry, namespace, tmp_path, MW_UNSAFE_REKEY_KEEP_KEY="1")
    print("negative control found:", *problems, sep="\n  ")
    assert any("span partitions" in p for p in problems), problems
    assert any("state differs" in p for p in problems), problems
