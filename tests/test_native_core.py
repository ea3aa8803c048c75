"""The native core (``MW_CORE=native``) on a real Kafka and Redis: two workers of the
running sum, each SIGKILLed once while records (1% re-sent) flow in, and every sum
exactly once; the workers say which core they run.

Negative control: the same on the native core with record-id dedup off
(``MW_UNSAFE_DISABLE_DEDUP``): the re-sent records are counted twice, and the checks
that count them (a production id sent with two values, keys' counts of sums beyond 1..n,
and their state beyond the truth) find it.

Skipped only where the native core is not built (``testbed/native.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client
from mwcore.tools.stack.localstack import LocalStack
from testbed.native import requires_native
from testbed.procs import joined, wait_until
from tests.support.running_sum import Deployment, make_inputs, verify

pytestmark = requires_native


def run_on_native(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, **env: str
) -> tuple[list[str], list[str]]:
    """Problems ``verify`` finds, and the workers' logs."""
    dep = Deployment.on(stack, namespace, tmp_path, worker_env={"MW_CORE": "native", **env})
    inputs = make_inputs(30_000, 300, dup_rate=0.01, seed=41)
    workers = [dep.add_worker("n0").start(), dep.add_worker("n1").start()]
    injector = dep.feed(registry, inputs, rate=3_000)
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 90, what="two checkpoints per interval")
        for w in workers:
            w.kill()
            w.start()
            target = sum(dep.commits()) + 8
            wait_until(lambda t=target: sum(dep.commits()) >= t, 90, what="commits after the restart")
        joined(injector, 120, "the injector")
        dep.wait_caught_up(injector.writer.end_offsets, timeout=180)
    finally:
        injector.release.set()
        for w in workers:
            w.terminate()
    return verify(inputs, registry, dep), [w.logs() for w in workers]


@pytest.mark.exactly_once
@pytest.mark.parametrize("seen", ["sorted-set", "buckets"])
def test_the_native_core_keeps_exactly_once_through_crashes(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, seen: str
) -> None:
    """With the seen ids in buckets (the default) and in the sorted set
    (``MW_SEEN_BUCKETS=0``): the re-sent records are found there, across the restarts.
    Commits overlap the next batch: the workers are killed with a commit in flight as
    often as not."""
    env = {"MW_SEEN_BUCKETS": "1" if seen == "buckets" else "0"}
    problems, logs = run_on_native(stack, registry, namespace, tmp_path, **env)
    assert all('"core": "native"' in text for text in logs), logs[0][-2000:]
    assert problems == [], "\n".join(problems)
    r = redis_client(stack.redis_url)
    kinds = {r.type(k) for k in r.scan_iter(f"mw:{{{namespace}/*:seen*", count=1000)}
    assert kinds == ({b"set", b"zset"} if seen == "buckets" else {b"zset"}), kinds  # buckets and their index
    if seen == "buckets":
        assert not any(k.endswith(b":seen") for k in r.scan_iter(f"mw:{{{namespace}/*", count=1000))


@pytest.mark.exactly_once
@pytest.mark.negative_control
def test_negative_control_the_native_core_without_dedup_counts_resent_records_twice(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    problems, _ = run_on_native(stack, registry, namespace, tmp_path, MW_UNSAFE_DISABLE_DEDUP="true")
    caught = {
        check
        for check in (
            "production ids sent twice with different values",
            "sums counts are not",
            "state differs",
        )
        if any(check in p for p in problems)
    }
    assert caught == {
        "production ids sent twice with different values",
        "sums counts are not",
        "state differs",
    }, problems
