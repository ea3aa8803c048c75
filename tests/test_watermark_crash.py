"""Three stages with out-of-order input while workers and the authority are SIGKILLed.

Run with one authority, and with two authority shards (the injector and the rollup
published by one, the forward and window stages by the other).

injector -> forward -> stage_count (1 s windows) -> rollup (5 s windows), with
several seconds of timestamp jitter and some records the injector lets through late.
Twelve SIGKILLs, each of a live worker or authority; a killed forward stage stays down
until 5,000 records wait for it in Kafka (four of the kills with one authority, three with
two shards). Forward is killed once it has caught up (the generator paused until its
published output watermark reaches the injector's): its last report then holds nothing
back, and only the authority's count of the records waiting in Kafka keeps the window
stage's watermark behind them. Afterwards:

- every published watermark is at least the one published before it (I-7);
- no event-time timer fired early: no window saw a record after its timer (I-8);
- the window counts and the rollups equal the offline truth exactly, each once;
- the late topic holds exactly the records the injector let through late (by id).

Negative control: the same run with the authority ignoring the backlog
(``MW_UNSAFE_IGNORE_BACKLOG``) fails the same check on windows that fired early.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from mwcore.api import ids
from mwcore.injector.injector import Injector
from mwcore.runtime.dead_letters import LATE_INDEX
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import late_stream, topic_name
from testbed import wire
from testbed.procs import Background, WorkerProc, joined, wait_until, worker_env
from testbed.topics import read_topic
from tests.support.watermarks import Published, authority
from tests.support.windows import ROLLUP_MS, WINDOW_MS

pytestmark = [pytest.mark.watermarks, pytest.mark.slow]

KEYS = 40
RECORDS = 30_000
RATE = 800  # records per second: the run lasts about 40 s
JITTER_MS = 4000
LATE_EVERY = 300
KILLS = 12
# Longer than the generator takes to send the input's jitter (4 s of event time, 1.25 s
# of its wall time): while forward is down, records wait in Kafka that the injector's
# watermark has passed, and only the authority's backlog accounting keeps the window
# stage's watermark behind them. Restarted at once on a fast host, forward was often
# back in time, and the negative control could find no early window
# (CHANGELOG.md, measured history, 2026-11-28: the backlog negative control).
FORWARD_DOWN_S = 3.0
# ... and longer, until the injector's watermark is FORWARD_BACKLOG_MS past where it was
# at the kill (up to FORWARD_HOLD_MAX_S): forward's backlog is then at least 5,000
# records however fast the generator kept its pace. With the backlog ignored, forward's
# output watermark jumps to its input's once it is back and reports, while most of that
# backlog is still unread, and the window stage fires ahead of it. With 3 s alone, on a
# loaded hour, the negative control once found no early window.
FORWARD_BACKLOG_MS = 20_000  # of event time: 5,000 records, 6.25 s at the generator's pace
FORWARD_HOLD_MAX_S = 12.0
T0 = 1_000_000


def generate(
    inj: Injector, stop: threading.Event, paused: threading.Event, result: dict[str, object]
) -> None:
    """Event time advances 4 ms per record; each record is up to JITTER_MS older than
    that; every LATE_EVERY-th record is made late (older than the reported watermark).
    While ``paused`` is set nothing is sent (the pace resumes where it was)."""
    rng = random.Random(7)
    truth: Counter[tuple[str, int]] = Counter()
    late: list[bytes] = []  # ids of the records sent late
    start = time.monotonic()
    for i in range(RECORDS):
        if stop.is_set():
            break
        if paused.is_set():
            began = time.monotonic()
            while paused.is_set() and not stop.is_set():
                time.sleep(0.01)
            start += time.monotonic() - began
        base = T0 + i * 4
        key = f"k{rng.randrange(KEYS)}"
        if i % LATE_EVERY == LATE_EVERY - 1 and inj.reported > T0 + JITTER_MS:
            ts = inj.reported - rng.randrange(1, 3000)
        else:
            ts = base - rng.randrange(JITTER_MS)
        rid = rng.randbytes(16)
        if inj.send("events", key, {"n": 1}, ts, rid):
            late.append(rid)
        else:
            truth[(key, ts // WINDOW_MS * WINDOW_MS)] += 1
        inj.advance(base - JITTER_MS)
        delay = start + i / RATE - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    end = T0 + RECORDS * 4 + 60_000
    inj.advance(end)
    inj.flush()
    result.update(truth=truth, late=late, end=end)


def run_pipeline(
    stack: LocalStack,
    registry: SchemaRegistry,
    namespace: str,
    tmp_path: Path,
    shards: int,
    **authority_env: str,
) -> list[str]:
    """The three-stage run with KILLS SIGKILLs; returns every problem ``check_pipeline``
    finds (and published watermarks that went back). A killed forward stage stays down
    ``FORWARD_DOWN_S`` (the others are started again at once)."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    env = worker_env(stack, namespace, MW_WATERMARK="authority", MW_REPORT_INTERVAL_MS="50")
    procs = {
        f"authority-{i}": authority(
            stack,
            namespace,
            log_dir,
            f"authority-{i}",
            MW_AUTHORITY_SHARD=str(i),
            MW_AUTHORITY_SHARDS=str(shards),
            **authority_env,
        )
        for i in range(shards)
    }
    procs |= {
        "forward": WorkerProc("tests.support.windows:Forward", env, log_dir, "forward"),
        "stage_count": WorkerProc("tests.support.windows:StageCount", env, log_dir, "stage_count"),
        "rollup": WorkerProc("tests.support.windows:Rollup", env, log_dir, "rollup"),
    }
    for p in procs.values():
        p.start()
    pub = Published(stack.bootstrap, namespace)
    inj = Injector(
        bootstrap=stack.bootstrap,
        client=connect_redis(stack.redis_url),
        registry=registry,
        name="src",
        outputs={"events": "mw.examples.Number"},
        namespace=namespace,
        partitions=2,
        report_interval_ms=50,
        **wire.injector_args(stack),
    )
    inj.start()
    stop = threading.Event()
    paused = threading.Event()
    result: dict[str, object] = {}
    gen = Background(generate, inj, stop, paused, result)
    problems: list[str] = []
    try:
        for name in ("forward", "stage_count", "rollup"):
            wait_until(lambda n=name: procs[n].ready, 60, what=f"{name} to join")  # type: ignore[misc]
        gen.start()
        # the same kills every run: forward is 4 of them with one authority, 3 with two
        # shards (with 11 for both, the two-shard run never killed forward)
        rng = random.Random(10 + shards)
        kills = 0
        while kills < KILLS:
            time.sleep(rng.uniform(1.5, 3.5))  # the pace of the kills
            pub.poll()
            victim = procs[rng.choice(sorted(procs))]
            if victim.name == "forward":
                caught_up(inj, pub, paused)
            waiting_from = inj.reported  # what forward reads after this is at least as new
            victim.kill()
            kills += 1
            paused.clear()
            if victim.name == "forward":
                hold_forward(inj, waiting_from, gen)
            victim.start()
        joined(gen, 300, "the generator")
        assert "end" in result
        end = int(result["end"])  # type: ignore[call-overload]
        wait_until(lambda: pub.input("rollup") >= end, 240, 0.5, "the rollup's watermark to reach the end")
        try:
            pub.assert_monotonic()  # everything published so far, read to the end
        except AssertionError as exc:
            problems.append(f"a published watermark went back: {exc}")
    finally:
        stop.set()
        inj.close()
        for p in procs.values():
            p.terminate()
        pub.close()

    assert sum(p.kills for p in procs.values()) == KILLS  # each one a live process
    truth: Counter[tuple[str, int]] = result["truth"]  # type: ignore[assignment]
    late_ids: list[bytes] = result["late"]  # type: ignore[assignment]
    return problems + check_pipeline(stack, registry, namespace, truth, late_ids)


def caught_up(inj: Injector, pub: Published, paused: threading.Event, timeout: float = 10.0) -> None:
    """Pause the generator until forward's published output watermark reaches the
    injector's (it holds nothing back: what it has read is sent and reported), up to
    ``timeout`` (printed: how long it took, or that it did not)."""
    paused.set()
    began = time.monotonic()
    while pub.output("forward") < inj.reported and time.monotonic() - began < timeout:
        time.sleep(0.05)
    behind = inj.reported - pub.output("forward")
    print(
        f"forward caught up in {time.monotonic() - began:.1f} s"
        if behind <= 0
        else f"forward {behind} ms behind"
    )


def hold_forward(inj: Injector, waiting_from: int, generating: Background) -> None:
    """Keep the killed forward stage down ``FORWARD_DOWN_S``, then until the injector's
    watermark is ``FORWARD_BACKLOG_MS`` past ``waiting_from`` or the input is all sent
    (up to ``FORWARD_HOLD_MAX_S``; printed: how long, and how much event time waits)."""
    began = time.monotonic()
    time.sleep(FORWARD_DOWN_S)
    while (
        time.monotonic() - began < FORWARD_HOLD_MAX_S
        and inj.reported < waiting_from + FORWARD_BACKLOG_MS
        and generating.is_alive()
    ):
        time.sleep(0.05)
    print(f"forward held down {time.monotonic() - began:.1f} s, {inj.reported - waiting_from} ms waiting")


def check_pipeline(
    stack: LocalStack,
    registry: SchemaRegistry,
    namespace: str,
    truth: Counter[tuple[str, int]],
    late_ids: list[bytes],
) -> list[str]:
    """Every way the windows, the rollups and the late topic differ from the truth
    (empty when all is well)."""
    problems = []
    counts = decoded(stack, registry, topic_name(namespace, "window_counts"))
    early = [c for c in counts if c["early"]]
    if early:
        problems.append(f"{len(early)} window records came after their timer fired (early watermark)")
    got = Counter({(c["key"], c["start"]): c["count"] for c in counts if not c["early"]})
    if len(got) != len(counts) - len(early):
        problems.append("a window was emitted twice")
    if got != +truth:
        wrong = sorted(k for k in got.keys() | truth.keys() if got[k] != truth[k])
        problems.append(f"{len(wrong)} window counts differ from the truth, e.g. {wrong[:3]}")

    rollups = decoded(stack, registry, topic_name(namespace, "rollups"))
    early_rollups = [r for r in rollups if r["early"]]
    if early_rollups:
        problems.append(f"{len(early_rollups)} rollup records came after their timer fired")
    want: Counter[tuple[str, int]] = Counter()
    for (key, start), n in truth.items():
        want[(key, start // ROLLUP_MS * ROLLUP_MS)] += n
    on_time = [r for r in rollups if not r["early"]]
    if Counter({(r["key"], r["start"]): r["count"] for r in on_time}) != want or len(on_time) != len(want):
        problems.append("the rollups differ from the truth")

    # the late copies' ids derive from the late records' ids: exactly those, each once (by id)
    routed = {m.id for m in read_topic(stack.bootstrap, topic_name(namespace, late_stream("forward")))}
    if not late_ids or routed != {ids.derive(rid, LATE_INDEX) for rid in late_ids}:
        problems.append(f"the late topic holds {len(routed)} records, {len(late_ids)} were sent late")
    return problems


@pytest.mark.parametrize("shards", [1, 2], ids=["one-authority", "two-authority-shards"])
def test_watermarks_survive_kills_with_out_of_order_input(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, shards: int
) -> None:
    problems = run_pipeline(stack, registry, namespace, tmp_path, shards)
    assert problems == [], "\n".join(problems)


@pytest.mark.negative_control
def test_negative_control_with_the_backlog_ignored_windows_fire_early(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same run and check (one authority) with the authority's backlog accounting
    off: while the forward stage is down its input waits in Kafka, yet its output
    watermark follows the injector's, and the window stage fires windows before the
    records forward sends once it is back."""
    problems = run_pipeline(stack, registry, namespace, tmp_path, 1, MW_UNSAFE_IGNORE_BACKLOG="1")
    print("negative control found:", *problems, sep="\n  ")
    assert any("early watermark" in p for p in problems), problems


def decoded(stack: LocalStack, registry: SchemaRegistry, topic: str) -> list[dict[str, object]]:
    """The topic's records, duplicates (re-sent after a crash, same id) dropped."""
    serde = wire.serde(stack, registry, topic, "mw.tests.WindowCount")
    seen: set[bytes] = set()
    out = []
    for m in read_topic(stack.bootstrap, topic):
        if m.id not in seen:
            seen.add(m.id)
            out.append(serde.decode(m.value))
    return out
