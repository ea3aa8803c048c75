"""An interval's whole state read at acquisition (``MW_WHOLE_STATE_MB``, semantics I-1,
I-5), on a real Redis and Kafka: every key's running sum comes out exact across a kill
and restart, with a cache that holds every key (the restarted owner reads the first
one's state whole and serves each key from that read) and with one far smaller than the
keys (``MW_MAX_CACHE_KEYS=8``: the first owner reads the empty state whole, then forgets
keys all the time and must go back to the store for them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from testbed.procs import joined, wait_until
from testbed.wire import source_writer
from tests.support.running_sum import Deployment, Injector, make_inputs, verify


def run(stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, **env: str) -> list[str]:
    """20,000 records over 300 keys, the worker killed and restarted after two
    checkpoints an interval: the problems ``verify`` finds, and any acquisition that did
    not read the state whole when it fit."""
    inputs = make_inputs(20_000, 300, dup_rate=0.01, seed=5)
    dep = Deployment.on(stack, namespace, tmp_path, worker_env={"MW_WHOLE_STATE_MB": "64", **env})
    worker = dep.add_worker("w0").start()
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=10_000)
    injector.start()
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
        worker.kill()
        worker.start()  # the new owner reads what the first committed, whole
        joined(injector, 60, "the injector")
        dep.wait_caught_up(writer.end_offsets, timeout=120)
    finally:
        worker.terminate()
    problems = verify(inputs, registry, dep)
    # The first start reads the empty state whole; the restart too, unless the intervals
    # have more keys than the cache holds (then each key is read on first use).
    small_cache = int(env.get("MW_MAX_CACHE_KEYS", "100000")) < 300
    for start, whole in [(1, True), (2, not small_cache)]:
        lines = (dep.log_dir / f"w0-{start}.log").read_text().splitlines()
        acquired = [json.loads(line) for line in lines if '"interval_acquired"' in line]
        if not acquired or any(e.get("state_read_whole") is not whole for e in acquired):
            problems.append(f"start {start}: the state not read whole {whole}: {acquired}")
    return problems


@pytest.mark.parametrize("cache_keys", ["8", "100000"], ids=["keys-forgotten", "all-kept"])
def test_running_sums_are_exact_with_the_whole_state_read_at_acquisition(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, cache_keys: str
) -> None:
    problems = run(stack, registry, namespace, tmp_path, MW_MAX_CACHE_KEYS=cache_keys)
    assert problems == [], "\n".join(problems)


@pytest.mark.negative_control
def test_negative_control_trusting_the_first_read_for_forgotten_keys_breaks_the_sums(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same run with the small cache, the read at acquisition still trusted after the
    cache forgot a key (``MW_UNSAFE_TRUST_FORGOTTEN_STATE``): a forgotten key's sum
    starts over."""
    problems = run(
        stack, registry, namespace, tmp_path, MW_MAX_CACHE_KEYS="8", MW_UNSAFE_TRUST_FORGOTTEN_STATE="1"
    )
    print("negative control found:", problems)
    assert any("not exactly 1..n" in p for p in problems), problems
