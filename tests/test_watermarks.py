"""Exact low watermarks against the real broker and Redis (semantics section 4).

- Records sitting in the Kafka backlog (their consumer stopped while the producer goes
  on) hold the consumer's input watermark; when it comes back, no timer fires early.
  Negative control: with the authority's backlog accounting off, the watermark passes them.
- A report under a stale token is rejected; a missing injector process holds the
  watermark; published watermarks never go back.
- ``late="drop"``: late records are counted and dropped.

A verdict on what the authority did not publish waits until its journal holds every
report written so far and it has published again since (``Published.after_reports``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mwcore.api import ids
from mwcore.api.clock import MIN_WATERMARK
from mwcore.errors import FencedError
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.localstack import LocalStack, free_port
from mwcore.transport.topics import late_stream, partition_counts, topic_name
from testbed.procs import WorkerProc, wait_until, worker_env
from testbed.topics import read_topic
from tests.support.watermarks import Published, authority, injector, windows
from tests.test_metrics import scrape

pytestmark = pytest.mark.watermarks
BACKLOG = 20_000


def backlog_scenario(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, backlog: bool
) -> tuple[list[dict[str, Any]], int]:
    """Returns the window outputs and the input watermark published while the
    consumer was stopped with records in its backlog."""
    extra = {} if backlog else {"MW_UNSAFE_IGNORE_BACKLOG": "1"}
    auth = authority(stack, namespace, log_dir, **extra).start()
    env = worker_env(stack, namespace, MW_WATERMARK="authority", MW_REPORT_INTERVAL_MS="50")
    worker = WorkerProc("tests.support.windows:WindowCount", env, log_dir, "windower")
    pub = Published(stack.bootstrap, namespace)
    inj = injector(stack, registry, namespace)
    try:
        worker.start()
        wait_until(lambda: worker.ready, 60, what="the windower to join")
        for i in range(10):
            inj.send("events", "k", {"n": 1}, 1000 + i * 100)
        inj.advance(2000)
        inj.flush()
        wait_until(lambda: len(windows(stack, registry, namespace)) >= 1, 60, 0.3, "the first window")
        inj.send("events", "k", {"n": 1}, 5100)  # window [5000, 6000) now has a pending timer
        inj.advance(5150)
        inj.flush()
        wait_until(lambda: pub.input("window_count") >= 5150, 30, what="the watermark to reach 5150")
        assert worker.terminate() == 0  # the consumer stops; its producer goes on
        # More than one consume's worth, so the consumer comes back to a backlog that
        # takes it several steps to read.
        for i in range(BACKLOG):
            inj.send("events", "k", {"n": 1}, 5200 + i % 700)
        inj.advance(20_000)
        inj.flush()
        wait_until(lambda: pub.output("src") >= 20_000, 30, what="the injector's watermark")
        # what the authority publishes once it has the injector's promise and segments
        held = pub.after_reports(connect_redis(stack.redis_url), namespace, "window_count").input
        worker.start()
        wait_until(
            lambda: (
                sum(w["count"] for w in windows(stack, registry, namespace) if not w["early"]) >= 11 + BACKLOG
            ),
            90,
            0.3,
            "every record to be counted in a window",
        )
        pub.assert_monotonic()
        return windows(stack, registry, namespace), held
    finally:
        inj.close()
        worker.terminate()
        auth.terminate()
        pub.close()


def backlog_problems(out: list[dict[str, Any]], held: int) -> list[str]:
    """What ``backlog_scenario`` shows going wrong (empty when the backlog held the
    watermark and every window came out whole, on time)."""
    problems = []
    if held > 5200:
        problems.append(f"the consumer's watermark passed records still in its backlog: {held}")
    early = [w for w in out if w["early"]]
    if early:
        problems.append(f"{len(early)} records came after their window's timer fired (early)")
    counts = {(w["start"], w["count"]) for w in out if not w["early"]}
    if counts != {(1000, 10), (5000, 1 + BACKLOG)}:
        problems.append(f"the windows are {sorted(counts)}, not [(1000, 10), (5000, {1 + BACKLOG})]")
    return problems


def test_records_in_the_backlog_hold_the_watermark_and_no_timer_fires_early(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    problems = backlog_problems(*backlog_scenario(stack, registry, namespace, log_dir, backlog=True))
    assert problems == [], problems


@pytest.mark.negative_control
def test_negative_control_without_backlog_accounting_the_watermark_passes_the_backlog(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """The same scenario and check, the authority ignoring the backlog: the watermark
    runs past the records still in it. (Whether the window's timer then fires before
    they are read depends on whether the restarted consumer's first fetch or the
    watermark reaches it first; tests/test_watermark_crash.py shows early windows.)"""
    problems = backlog_problems(*backlog_scenario(stack, registry, namespace, log_dir, backlog=False))
    assert any("passed records still in its backlog" in p for p in problems), problems


def zombie_injector_scenario(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, **extra: str
) -> tuple[int, WorkerProc]:
    """An injector process reports 5000; a replacement is granted; the old one then
    reports 9000. Returns what was published for the injector after that, and the
    (still running) authority."""
    auth = authority(stack, namespace, log_dir, **extra).start()
    pub = Published(stack.bootstrap, namespace)
    old = injector(stack, registry, namespace)
    try:
        old.advance(5000)
        old.flush()
        wait_until(lambda: pub.output("src") == 5000, 30, what="the first report")
        injector(stack, registry, namespace)  # same process index: a new grant
        with pytest.raises(FencedError):  # the zombie learns it was replaced ...
            old.advance(9000)
            old.report()  # ... but its report is written, after the replacement's grant
        # what the authority publishes once it has read that report
        return pub.after_reports(connect_redis(stack.redis_url), namespace, "src").output, auth
    finally:
        pub.close()


def stale_report_problems(published: int) -> list[str]:
    """The zombie reported 9000 after the replacement's grant; the injector's published
    watermark must still be the 5000 reported before."""
    return [] if published == 5000 else [f"the zombie's report moved the watermark from 5000 to {published}"]


def test_reports_under_a_stale_token_are_rejected(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    published, auth = zombie_injector_scenario(stack, registry, namespace, log_dir)
    pub = Published(stack.bootstrap, namespace)
    try:
        assert stale_report_problems(published) == []
        assert auth.log_has('"report_rejected"')
        replacement = injector(stack, registry, namespace)  # the current process (a new grant)
        replacement.advance(7000)
        replacement.close()
        wait_until(lambda: pub.output("src") == 7000, 30, what="the replacement's report")
        pub.assert_monotonic()
        shown = subprocess.run(
            [sys.executable, "-m", "mwcore", "watermarks", "--once"],
            env={**os.environ, "MW_BOOTSTRAP": stack.bootstrap, "MW_NAMESPACE": namespace},
            capture_output=True,
            check=True,
            timeout=60,
        )
        [row] = [r for r in json.loads(shown.stdout.splitlines()[-1]) if r["name"] == "src"]
        assert row["output"] == 7000 and row["kind"] == "injector"
    finally:
        auth.terminate()
        pub.close()


@pytest.mark.negative_control
def test_negative_control_accepting_stale_tokens_lets_a_zombie_move_the_watermark(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """The same scenario and check, the authority accepting reports under any token."""
    published, auth = zombie_injector_scenario(
        stack, registry, namespace, log_dir, MW_UNSAFE_ACCEPT_STALE_REPORTS="1"
    )
    auth.terminate()
    problems = stale_report_problems(published)
    assert problems == ["the zombie's report moved the watermark from 5000 to 9000"], problems


def test_a_missing_injector_process_holds_the_watermark(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    auth = authority(stack, namespace, log_dir).start()
    pub = Published(stack.bootstrap, namespace)
    r = connect_redis(stack.redis_url)
    p0 = injector(stack, registry, namespace, index=0, processes=2)
    try:
        p0.advance(5000)
        p0.report()
        # the authority has read p0's report and published since: process 1 has never reported
        assert pub.after_reports(r, namespace, "src").output == MIN_WATERMARK
        p1 = injector(stack, registry, namespace, index=1, processes=2)
        p1.advance(3000)
        p1.close()  # its last word: 3000; then it is gone
        wait_until(lambda: pub.output("src") == 3000, 30, what="both processes' reports")
        p0.advance(8000)
        p0.report()
        assert pub.after_reports(r, namespace, "src").output == 3000  # held by the missing process
        p1 = injector(stack, registry, namespace, index=1, processes=2)  # it comes back
        p1.advance(6000)
        p1.close()
        wait_until(lambda: pub.output("src") == 6000, 30, what="the returning process")
        pub.assert_monotonic()
    finally:
        p0.close()
        auth.terminate()
        pub.close()


def test_a_restarted_injector_keeps_its_promise_and_holds_what_it_had_in_flight(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    auth = authority(stack, namespace, log_dir).start()
    env = worker_env(stack, namespace, MW_WATERMARK="authority")
    worker = WorkerProc("tests.support.windows:WindowCount", env, log_dir, "windower")
    pub = Published(stack.bootstrap, namespace)
    first = injector(stack, registry, namespace)
    try:
        worker.start()
        wait_until(lambda: worker.ready, 60, what="the windower to join")
        first.advance(5000)
        first.report()
        wait_until(lambda: pub.input("window_count") >= 5000, 30, what="the first promise")
        assert worker.terminate() == 0  # the consumer stops; its backlog builds up
        for i in range(20):
            first.send("events", "k", {"n": 1}, 5100 + i)
        first._sender.flush(30)  # acknowledged, never reported: then the process dies
        second = injector(stack, registry, namespace)  # the same process, restarted
        assert second.reported == 5000  # its promise survived
        assert second.send("events", "k", {"n": 1}, 4000)  # still late after the restart
        second.advance(20_000)
        second.flush()
        wait_until(lambda: pub.output("src") >= 20_000, 30, what="the new promise")
        # what the first run left in Kafka holds it, once the authority has every report
        held = pub.after_reports(connect_redis(stack.redis_url), namespace, "window_count").input
        assert held <= 5100, held
        second.close()
    finally:
        worker.terminate()
        auth.terminate()
        pub.close()


def test_late_drop_counts_and_drops_late_records(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """``Options(late="drop")``: records the injector let through late are neither
    processed nor routed (no late topic); the worker counts them; the rest go on."""
    port = free_port()
    env = worker_env(stack, namespace)
    worker = WorkerProc("tests.support.computations:DropLateForward", env, log_dir, "drop")
    worker.start(MW_METRICS_PORT=str(port), MW_METRICS_HOST="127.0.0.1")
    try:
        wait_until(lambda: worker.ready, 60, what="the worker to join")
        inj = injector(stack, registry, namespace, partitions=2)  # the forward computation's
        on_time, late = [], []
        for i in range(100):
            on_time.append(bytes([1, i]) * 8)
            assert not inj.send("events", f"k{i % 7}", {"n": i}, 1_000 + i, on_time[-1])
        inj.advance(5_000)
        inj.flush()  # reported: 5,000 is promised
        for i in range(20):
            late.append(bytes([2, i]) * 8)
            assert inj.send("events", f"k{i % 7}", {"n": i}, 2_000 + i, late[-1])  # behind the promise
        for i in range(100):
            on_time.append(bytes([3, i]) * 8)
            assert not inj.send("events", f"k{i % 7}", {"n": i}, 6_000 + i, on_time[-1])
        inj.close()
        forwarded = topic_name(namespace, "forwarded")
        wait_until(
            lambda: len(read_topic(stack.bootstrap, forwarded)) >= len(on_time),
            60,
            0.3,
            "the on-time records",
        )
        wait_until(
            lambda: scrape(port).get(("mw_late_records_total", "forward_drop")) == len(late),
            30,
            0.3,
            "the late records to be counted",
        )
        got = {m.id for m in read_topic(stack.bootstrap, forwarded)}
        assert got == {ids.derive(rid, 0) for rid in on_time}  # none of the late ones
        m = scrape(port)
        assert m[("mw_records_in_total", "forward_drop")] == len(on_time)
        assert m[("mw_dead_letters_total", "forward_drop")] == 0
        late_topic = topic_name(namespace, late_stream("forward_drop"))
        assert partition_counts(stack.bootstrap, [late_topic]) == {}  # not even created
    finally:
        worker.terminate()
