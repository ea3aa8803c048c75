"""Seen-id memory stays bounded: ids are forgotten once the input watermark (minus a
slack) passes their timestamps (semantics section 2). Over 1,000,000 records the
interval seen sets in Redis stay near the ids of the last few seconds of event time,
and so does the worker's memory. Negative control: with a slack too large to ever
pass (``MW_SEEN_GC_SLACK_MS``), the same check finds the seen sets keeping every id."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mwcore.injector.injector import Injector
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.store.scripts import SEEN_BUCKET_MS
from mwcore.tools.stack.localstack import LocalStack
from testbed import wire
from testbed.procs import WorkerProc, wait_until, worker_env
from tests.support.watermarks import authority

pytestmark = [pytest.mark.watermarks, pytest.mark.slow]

T0 = 10_000_000
SLACK_MS = 5000
SKEW_MS = 5000
RSS_EVERY = 10_000  # records between samples of the worker's memory
WARM = 100_000  # records after which the worker's memory is compared


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, records: int, slack_ms: int
) -> dict[str, float]:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    r = connect_redis(stack.redis_url)
    auth = authority(stack, namespace, log_dir).start()
    env = worker_env(
        stack,
        namespace,
        MW_WATERMARK="authority",
        MW_SEEN_GC_SLACK_MS=str(slack_ms),
    )
    worker = WorkerProc("tests.support.windows:Tally", env, log_dir, "tally").start()
    inj = Injector(
        bootstrap=stack.bootstrap,
        client=r,
        registry=registry,
        name="src",
        outputs={"events": "mw.examples.Number"},
        namespace=namespace,
        partitions=2,
        skew_ms=SKEW_MS,  # the skew limit keeps the backlog (and so the watermark lag) short
        skew_of="tally",
        **wire.injector_args(stack),
    )
    inj.start()
    seen_keys = [f"mw:{{{namespace}/tally/{i}}}:seen" for i in range(2)]

    def seen() -> int:  # in the sorted sets, and in the buckets (MW_SEEN_BUCKETS)
        buckets = [f"{k}:{b.decode()}" for k in seen_keys for b in r.zrange(f"{k}:b", 0, -1)]
        return sum(int(r.zcard(k)) for k in seen_keys) + sum(int(r.scard(b)) for b in buckets)

    peak_seen, rss = 0, []
    rng = random.Random(3)
    try:
        wait_until(
            lambda: '"interval_acquired"' in worker.current_log() or worker.ready, 60, what="the worker"
        )
        for i in range(records):
            ts = T0 + i
            inj.send("events", f"k{rng.randrange(1000)}", {"n": 1}, ts)
            if i % 2000 == 0:
                inj.advance(ts)
                inj.hold_for_skew(ts, timeout=120)
                peak_seen = max(peak_seen, seen())  # at every step
            if i % RSS_EVERY == 0:
                rss.append(rss_mb(worker.pid))
        inj.advance(T0 + records)
        inj.flush()
        inj.hold_for_skew(T0 + records + SKEW_MS, timeout=120)  # wait until all is counted
        peak_seen = max(peak_seen, seen())
        rss.append(rss_mb(worker.pid))
        total = sum(int(v) for i in range(2) for v in r.hvals(f"mw:{{{namespace}/tally/{i}}}:state"))
    finally:
        inj.close()
        worker.terminate()
        auth.terminate()
    return {
        "peak_seen": peak_seen,
        "counted": total,
        # warmed up (state cache, seen sets and buffers at their working size) at WARM records
        "rss_first": rss[min(WARM // RSS_EVERY, len(rss) - 1)],
        "rss_last": rss[-1],
        "rss_max": max(rss),
    }


# ids of about SLACK_MS + SKEW_MS of event time (1 record per ms), plus batches in flight
# (what a run measured: docs/benchmarks.md), plus one bucket's (MW_SEEN_BUCKETS: a bucket
# goes once all of it is below the GC's timestamp)
MAX_SEEN = (SLACK_MS + SKEW_MS) * 3 // 2 + SEEN_BUCKET_MS
# flat: the worker's RSS once warm (WARM records) and at the end
MAX_RSS_GROWTH_MB = 16


def bounded_problems(got: dict[str, float], records: int) -> list[str]:
    """What exceeds the bounds (empty when the seen ids and the memory stay bounded)."""
    problems = []
    if got["counted"] != records:
        problems.append(f"{got['counted']} of {records} records counted")
    if got["peak_seen"] > MAX_SEEN:
        problems.append(f"{got['peak_seen']:.0f} seen ids at the peak, more than {MAX_SEEN}")
    if got["rss_last"] - got["rss_first"] >= MAX_RSS_GROWTH_MB:
        grew = got["rss_last"] - got["rss_first"]
        problems.append(f"the worker's RSS grew by {grew:.0f} MB after the first {WARM:,} records")
    return problems


def test_seen_ids_stay_bounded_over_a_million_records(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    records = 1_000_000
    got = run(stack, registry, namespace, tmp_path, records, SLACK_MS)
    print(f"seen-id memory over {records} records: {got}")
    problems = bounded_problems(got, records)
    assert problems == [], problems


@pytest.mark.negative_control
def test_negative_control_without_gc_the_seen_ids_pile_up(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same run and check (on 100,000 records), the slack too large to pass: no id
    is ever forgotten."""
    records = 100_000
    got = run(stack, registry, namespace, tmp_path, records, slack_ms=10**12)
    problems = bounded_problems(got, records)
    print("negative control found:", problems, got)
    assert any("seen ids at the peak" in p for p in problems), problems
    assert got["peak_seen"] == records, got  # every id kept
