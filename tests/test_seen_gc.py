"""Seen-id memory stays bounded: ids are forgotten once the input watermark (minus a
slack) passes their timestamps (semantics section 2). Over 1,000,000 records the
interval seen sets in Redis stay near the ids of the last few seconds of event time,
and so does the worker's memory. Negative control: with a slack too large to ever
pass, the seen sets keep every id."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import redis

from mwcore.injector import Injector
from mwcore.localstack import LocalStack
from mwcore.serde import SchemaRegistry
from tests.support.procs import WorkerProc, wait_until, worker_env
from tests.test_watermarks import authority

pytestmark = [pytest.mark.watermarks, pytest.mark.slow]

T0 = 10_000_000
SLACK_MS = 5000
SKEW_MS = 5000


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
    r = redis.Redis.from_url(stack.redis_url)
    auth = authority(stack, namespace, log_dir).start()
    env = worker_env(
        stack.bootstrap,
        stack.redis_url,
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
    )
    inj.start()
    seen_keys = [f"mw:{{{namespace}/tally/{i}}}:seen" for i in range(2)]
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
            if i % 50_000 == 0:
                peak_seen = max(peak_seen, sum(int(r.zcard(k)) for k in seen_keys))
                rss.append(rss_mb(worker.pid))
        inj.advance(T0 + records)
        inj.flush()
        inj.hold_for_skew(T0 + records + SKEW_MS, timeout=120)  # wait until all is counted
        peak_seen = max(peak_seen, sum(int(r.zcard(k)) for k in seen_keys))
        rss.append(rss_mb(worker.pid))
        total = sum(int(v) for i in range(2) for v in r.hvals(f"mw:{{{namespace}/tally/{i}}}:state"))
    finally:
        inj.close()
        worker.terminate()
        auth.terminate()
    return {
        "peak_seen": peak_seen,
        "counted": total,
        "rss_first": rss[1] if len(rss) > 1 else rss[0],
        "rss_last": rss[-1],
    }


def test_seen_ids_stay_bounded_over_a_million_records(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    records = 1_000_000
    got = run(stack, registry, namespace, tmp_path, records, SLACK_MS)
    print(f"seen-id memory over {records} records: {got}")
    assert got["counted"] == records
    # ids of about SLACK_MS + SKEW_MS of event time (1 record per ms), plus batches in flight
    assert got["peak_seen"] <= 4 * (SLACK_MS + SKEW_MS), got
    assert got["rss_last"] - got["rss_first"] < 64, got


def test_negative_control_without_gc_the_seen_ids_pile_up(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    records = 100_000
    got = run(stack, registry, namespace, tmp_path, records, slack_ms=10**12)
    assert got["counted"] == records
    assert got["peak_seen"] == records
