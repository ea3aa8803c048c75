"""Timers (semantics I-9): fire in timestamp order per key, once, and survive restarts.

The watermark is driven by hand (the seam the watermark authority plugs into). After
each advance the set of fired timers must be exactly those below the watermark: none
early, none missing; the worker is SIGKILLed between advances, so timers set before a
crash fire after it.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest
import redis

from mwcore.localstack import LocalStack
from mwcore.serde import AvroSerde, SchemaRegistry
from mwcore.source import SourceWriter
from mwcore.transport import ensure_topics, topic_name
from tests.support.procs import WorkerProc, wait_until, worker_env
from tests.support.topics import Msg, read_topic

KEYS = 60
STEPS = [1_000, 4_000, 4_000, 9_000, 20_000]  # watermarks; the repeat proves nothing fires twice


def _fired(bootstrap: str, topic: str, serde: AvroSerde) -> tuple[list[Msg], dict[bytes, dict[str, object]]]:
    msgs = read_topic(bootstrap, topic)
    return msgs, {m.id: serde.decode(m.value) for m in msgs}


@pytest.mark.timers
def test_timers_fire_in_order_once_and_survive_restarts(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    rng = random.Random(5)
    requests = topic_name(namespace, "timer_requests")
    fired_topic = topic_name(namespace, "fired")
    ensure_topics(stack.bootstrap, {requests: 4})
    writer = SourceWriter(stack.bootstrap, registry, requests, "mw.tests.TimerRequest")
    expected: set[tuple[str, int]] = set()
    for i in range(KEYS * 5):
        key = f"k{i % KEYS}"
        at = [rng.randrange(0, 15_000) for _ in range(rng.randint(1, 6))]
        expected.update((key, t) for t in at)
        writer.write(key, {"at": at}, 0)
    writer.flush()

    r = redis.Redis.from_url(stack.redis_url)
    env = worker_env(stack.bootstrap, stack.redis_url, namespace)
    worker = WorkerProc("tests.support.computations:TimerProbe", env, tmp_path, "timers").start()
    serde = AvroSerde(registry, "mw.tests.TimerFired")
    wm_key = f"mw:wm:{namespace}:timer_probe"

    def stored_timers() -> int:
        return sum(int(r.hlen(f"mw:{{{namespace}/timer_probe/{i}}}:timers")) for i in range(4))

    wait_until(lambda: stored_timers() == len(expected), 60, what="every timer to be checkpointed")
    for step, wm in enumerate(STEPS):
        worker.kill()  # timers live in the checkpoint, not in the process
        r.set(wm_key, wm)
        worker.start()
        due = {(k, t) for k, t in expected if t < wm}
        wait_until(lambda d=due: stored_timers() == len(expected) - len(d), 90, what=f"timers below {wm}")
        msgs, by_id = _fired(stack.bootstrap, fired_topic, serde)
        got = [(str(v["key"]), int(v["timestamp"])) for v in by_id.values()]  # type: ignore[call-overload]
        assert len(got) == len(set(got)), f"step {step}: a timer fired twice"
        assert set(got) == due, f"step {step}: early {set(got) - due}, missing {due - set(got)}"

        # Per key, in the order Kafka holds them (one partition per key): timestamps ascend.
        per_key: dict[str, list[int]] = defaultdict(list)
        first_seen: set[bytes] = set()
        for m in sorted(msgs, key=lambda m: (m.partition, m.offset)):
            if m.id in first_seen:
                continue
            first_seen.add(m.id)
            v = by_id[m.id]
            per_key[str(v["key"])].append(int(v["timestamp"]))  # type: ignore[call-overload]
        for key, stamps in per_key.items():
            assert stamps == sorted(stamps), f"{key} fired out of order: {stamps}"
    worker.terminate()
