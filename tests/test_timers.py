"""Timers (semantics I-9): fire in timestamp order per key, once, and survive restarts.

The watermark is driven by hand (the seam the watermark authority plugs into). After
each advance the set of fired timers must be exactly those below the watermark: none
early, none missing, none fired twice (a firing's production id never carries two
values, each key's firing count in state equals its distinct firings), and the
checkpoint holds exactly the timers not yet due. The worker is SIGKILLed between
advances, so timers set before a crash fire after it.

Negative controls: with a firing's deletion left out of the checkpoint
(``MW_UNSAFE_KEEP_FIRED_TIMERS``), the same check finds timers fired again after a
restart; with timers firing on no watermark at all (``MW_WATERMARK=max``: every event
timer due at once), it finds timers fired early.
"""

from __future__ import annotations

import random
from collections import defaultdict
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

pytestmark = pytest.mark.timers

KEYS = 60
PARTITIONS = 4
STEPS = [1_000, 4_000, 4_000, 9_000, 20_000]  # watermarks; the repeat proves nothing fires twice


def check_firings(
    msgs: list[Msg], serde: AvroSerde, due: set[tuple[str, int]], stored: int, not_due: int
) -> list[str]:
    """Every way the fired topic and the checkpoint differ from "exactly the timers in
    ``due`` fired, each once, in timestamp order per key" (empty when all is well)."""
    problems: list[str] = []
    values: dict[bytes, bytes] = {}
    twice: set[bytes] = set()
    for m in sorted(msgs, key=lambda m: (m.partition, m.offset)):
        if values.setdefault(m.id, m.value) != m.value:
            twice.add(m.id)  # the same firing applied again: a new count in its value
    if twice:
        problems.append(f"{len(twice)} timers fired twice (one firing id, two values)")
    by_id = {i: serde.decode(v) for i, v in values.items()}
    got = [(str(v["key"]), int(v["timestamp"])) for v in by_id.values()]
    if len(got) != len(set(got)):
        problems.append(f"{len(got) - len(set(got))} timers fired twice (two firing ids)")
    early, missing = set(got) - due, due - set(got)
    if early:
        problems.append(f"{len(early)} timers fired early, e.g. {sorted(early)[:3]}")
    if missing:
        problems.append(f"{len(missing)} timers below the watermark never fired, e.g. {sorted(missing)[:3]}")

    # Per key, in the order Kafka holds them (one partition per key): timestamps ascend;
    # the count in state at each firing is one more than at the one before.
    stamps: dict[str, list[int]] = defaultdict(list)
    seqs: dict[str, list[int]] = defaultdict(list)
    first_seen: set[bytes] = set()
    for m in sorted(msgs, key=lambda m: (m.partition, m.offset)):
        if m.id in first_seen:
            continue
        first_seen.add(m.id)
        v = by_id[m.id]
        stamps[str(v["key"])].append(int(v["timestamp"]))
        seqs[str(v["key"])].append(int(v["seq"]))
    disordered = [k for k, ts in stamps.items() if ts != sorted(ts)]
    if disordered:
        problems.append(f"{len(disordered)} keys' timers fired out of order, e.g. {disordered[:3]}")
    miscounted = [k for k, s in seqs.items() if s != list(range(1, len(s) + 1))]
    if miscounted:
        problems.append(f"{len(miscounted)} keys counted firings that are not 1..n, e.g. {miscounted[:3]}")
    if stored != not_due:
        problems.append(f"the checkpoint holds {stored} timers, {not_due} are not yet due")
    return problems


def run_timer_steps(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, **env: str
) -> list[str]:
    """Sets timers for 60 keys, then advances the watermark in STEPS with a SIGKILL and
    restart of the worker before each; returns every problem ``check_firings`` finds."""
    rng = random.Random(5)
    requests = topic_name(namespace, "timer_requests")
    fired_topic = topic_name(namespace, "fired")
    ensure_topics(stack.bootstrap, {requests: PARTITIONS})
    writer = source_writer(stack, registry, requests, "mw.tests.TimerRequest")
    expected: set[tuple[str, int]] = set()
    for i in range(KEYS * 5):
        key = f"k{i % KEYS}"
        at = [rng.randrange(0, 15_000) for _ in range(rng.randint(1, 6))]
        expected.update((key, t) for t in at)
        writer.write(key, {"at": at}, 0)
    writer.flush()

    r = connect_redis(stack.redis_url)
    worker = WorkerProc(
        "tests.support.computations:TimerProbe",
        worker_env(stack, namespace, **env),
        tmp_path,
        "timers",
    ).start()
    serde = wire.serde(stack, registry, topic_name(namespace, "fired"), "mw.tests.TimerFired")
    wm_key = f"mw:wm:{namespace}:timer_probe"

    def stored_timers() -> int:
        return sum(int(r.hlen(f"mw:{{{namespace}/timer_probe/{i}}}:timers")) for i in range(PARTITIONS))

    def fired() -> set[tuple[str, int]]:
        return {(str(v["key"]), int(v["timestamp"])) for v in map(serde.decode, _values(stack, fired_topic))}

    def settled(due: set[tuple[str, int]]) -> bool:
        """Every due timer's firing is in the topic, and no production is pending (all
        sent ones acknowledged and their deletion committed)."""
        if any(r.hlen(f"mw:{{{namespace}/timer_probe/{i}}}:pending") for i in range(PARTITIONS)):
            return False
        return due <= fired()

    problems: list[str] = []
    try:
        # every timer checkpointed (or, were the watermark wrong, fired: the first step's check finds it)
        wait_until(
            lambda: stored_timers() + len(fired()) >= len(expected), 60, 0.5, "every timer to be checkpointed"
        )
        for step, wm in enumerate(STEPS):
            worker.kill()  # timers live in the checkpoint, not in the process
            r.set(wm_key, wm)
            worker.start()
            due = {(k, t) for k, t in expected if t < wm}
            try:
                wait_until(lambda d=due: settled(d), 90, 0.5, f"the timers below {wm} to fire")
            except TimeoutError as exc:
                problems.append(f"step {step}: {exc}")  # the check below says what is missing
            found = check_firings(
                read_topic(stack.bootstrap, fired_topic), serde, due, stored_timers(), len(expected - due)
            )
            problems += [f"step {step} (watermark {wm}): {p}" for p in found]
    finally:
        worker.terminate()
    return problems


def _values(stack: LocalStack, topic: str) -> list[bytes]:
    return [m.value for m in read_topic(stack.bootstrap, topic)]


def test_timers_fire_in_order_once_and_survive_restarts(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    problems = run_timer_steps(stack, registry, namespace, tmp_path)
    assert problems == [], "\n".join(problems)


@pytest.mark.negative_control
def test_negative_control_fired_timers_kept_in_the_checkpoint_fire_again(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same steps and check, a firing's deletion left out of its checkpoint: every
    restart recovers the timers that already fired and fires them again."""
    problems = run_timer_steps(stack, registry, namespace, tmp_path, MW_UNSAFE_KEEP_FIRED_TIMERS="1")
    print("negative control found:", *problems, sep="\n  ")
    assert any("fired twice" in p for p in problems), problems
    assert any("the checkpoint holds" in p for p in problems), problems


@pytest.mark.negative_control
def test_negative_control_timers_without_a_watermark_fire_early(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same steps and check, the worker's timers firing on the end of time instead
    of the watermark (``MW_WATERMARK=max``): the first step already fires timers far
    above its watermark."""
    problems = run_timer_steps(stack, registry, namespace, tmp_path, MW_WATERMARK="max")
    print("negative control found:", *problems, sep="\n  ")
    assert any(p.startswith("step 0 ") and "fired early" in p for p in problems), problems
