"""Three stages with out-of-order input while workers and the authority are SIGKILLed.

Run with one authority, and with two authority shards (the injector and the rollup
published by one, the forward and window stages by the other).

injector -> forward -> stage_count (1 s windows) -> rollup (5 s windows), with
several seconds of timestamp jitter and some records the injector lets through late.
At least ten SIGKILLs, of workers and of the authority. Afterwards:

- every published watermark is at least the one published before it (I-7);
- no event-time timer fired early: no window saw a record after its timer (I-8);
- the window counts and the rollups equal the offline truth exactly, each once;
- the late topic holds exactly the records the injector let through late.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from mwcore.injector import Injector
from mwcore.localstack import LocalStack
from mwcore.serde import AvroSerde, SchemaRegistry
from mwcore.transport import late_stream, topic_name
from tests.support.procs import WorkerProc, wait_until, worker_env
from tests.support.topics import read_topic
from tests.support.windows import ROLLUP_MS, WINDOW_MS
from tests.test_watermarks import Published, authority

pytestmark = [pytest.mark.watermarks, pytest.mark.slow]

KEYS = 40
RECORDS = 30_000
RATE = 800  # records per second: the run lasts about 40 s
JITTER_MS = 4000
LATE_EVERY = 300
KILLS = 12
T0 = 1_000_000


def generate(inj: Injector, stop: threading.Event, result: dict[str, object]) -> None:
    """Event time advances 1 ms per record; each record is up to JITTER_MS older than
    that; every LATE_EVERY-th record is made late (older than the reported watermark)."""
    rng = random.Random(7)
    truth: Counter[tuple[str, int]] = Counter()
    late = 0
    start = time.monotonic()
    for i in range(RECORDS):
        if stop.is_set():
            break
        base = T0 + i * 4
        key = f"k{rng.randrange(KEYS)}"
        if i % LATE_EVERY == LATE_EVERY - 1 and inj.reported > T0 + JITTER_MS:
            ts = inj.reported - rng.randrange(1, 3000)
        else:
            ts = base - rng.randrange(JITTER_MS)
        if inj.send("events", key, {"n": 1}, ts):
            late += 1
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


@pytest.mark.parametrize("shards", [1, 2], ids=["one-authority", "two-authority-shards"])
def test_watermarks_survive_kills_with_out_of_order_input(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, shards: int
) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    env = worker_env(
        stack.bootstrap, stack.redis_url, namespace, MW_WATERMARK="authority", MW_REPORT_INTERVAL_MS="50"
    )
    procs = {
        f"authority-{i}": authority(
            stack,
            namespace,
            log_dir,
            f"authority-{i}",
            MW_AUTHORITY_SHARD=str(i),
            MW_AUTHORITY_SHARDS=str(shards),
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
        client=redis.Redis.from_url(stack.redis_url),
        registry=registry,
        name="src",
        outputs={"events": "mw.examples.Number"},
        namespace=namespace,
        partitions=2,
        report_interval_ms=50,
    )
    inj.start()
    stop = threading.Event()
    result: dict[str, object] = {}
    gen = threading.Thread(target=generate, args=(inj, stop, result), daemon=True)
    try:
        for name in ("forward", "stage_count", "rollup"):
            wait_until(lambda n=name: procs[n].ready, 60, what=f"{name} to join")  # type: ignore[misc]
        gen.start()
        rng = random.Random(11)
        kills = 0
        while kills < KILLS:
            time.sleep(rng.uniform(1.5, 3.5))
            pub.poll()
            victim = procs[rng.choice(sorted(procs))]
            victim.kill()
            kills += 1
            victim.start()
        gen.join(300)
        assert not gen.is_alive() and "end" in result
        end = int(result["end"])  # type: ignore[call-overload]
        wait_until(lambda: pub.input("rollup") >= end, 240, 0.5, "the rollup's watermark to reach the end")
        time.sleep(2)
        pub.assert_monotonic()
    finally:
        stop.set()
        inj.close()
        for p in procs.values():
            p.terminate()
        pub.close()

    assert sum(p.kills for p in procs.values()) >= 10
    truth: Counter[tuple[str, int]] = result["truth"]  # type: ignore[assignment]

    counts = decoded(stack, registry, topic_name(namespace, "window_counts"))
    assert [c for c in counts if c["early"]] == [], "a window saw a record after its timer fired"
    got = Counter({(c["key"], c["start"]): c["count"] for c in counts})
    assert len(got) == len(counts), "a window was emitted twice"
    assert got == +truth

    rollups = decoded(stack, registry, topic_name(namespace, "rollups"))
    assert [r for r in rollups if r["early"]] == []
    want: Counter[tuple[str, int]] = Counter()
    for (key, start), n in truth.items():
        want[(key, start // ROLLUP_MS * ROLLUP_MS)] += n
    assert Counter({(r["key"], r["start"]): r["count"] for r in rollups}) == want
    assert len(rollups) == len(want)

    late = {m.id for m in read_topic(stack.bootstrap, topic_name(namespace, late_stream("forward")))}
    assert len(late) == result["late"] and len(late) > 0


def decoded(stack: LocalStack, registry: SchemaRegistry, topic: str) -> list[dict[str, object]]:
    """The topic's records, duplicates (re-sent after a crash, same id) dropped."""
    serde = AvroSerde(registry, "mw.tests.WindowCount")
    seen: set[bytes] = set()
    out = []
    for m in read_topic(stack.bootstrap, topic):
        if m.id not in seen:
            seen.add(m.id)
            out.append(serde.decode(m.value))
    return out
