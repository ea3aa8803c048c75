"""Exact low watermarks against the real broker and Redis (semantics section 4).

- Records sitting in the Kafka backlog (their consumer stopped while the producer goes
  on) hold the consumer's input watermark; when it comes back, no timer fires early.
  Negative control: with the authority's backlog accounting off, a timer fires early.
- A report under a stale token is rejected; a missing injector process holds the
  watermark; published watermarks never go back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from mwcore.errors import FencedError
from mwcore.injector import Injector
from mwcore.localstack import LocalStack
from mwcore.serde import AvroSerde, SchemaRegistry
from mwcore.transport import consumer_config, topic_name
from mwcore.watermark import MIN_WATERMARK
from mwcore.watermarks.feed import WatermarkFeed, watermark_topic
from tests.support.procs import WorkerProc, wait_until, worker_env
from tests.support.topics import read_topic

pytestmark = pytest.mark.watermarks
BACKLOG = 20_000


class Published:
    """Every value the authority published, in order, as read from the topic."""

    def __init__(self, bootstrap: str, namespace: str) -> None:
        self.feed = WatermarkFeed(bootstrap, namespace)  # creates the topic
        conf = consumer_config(bootstrap, f"hist-{uuid.uuid4().hex}")
        self._c = Consumer(conf)
        self._c.assign([TopicPartition(watermark_topic(namespace), 0, 0)])
        self.history: list[dict[str, Any]] = []

    def poll(self) -> None:
        self.feed.poll()
        for m in self._c.consume(1000, 0.05):
            if m.error() is None and m.value():
                self.history.append(json.loads(m.value() or b"{}"))

    def input(self, name: str) -> int:
        self.poll()
        wm = self.feed.get(name)
        return MIN_WATERMARK if wm is None else wm.input

    def output(self, name: str) -> int:
        self.poll()
        wm = self.feed.get(name)
        return MIN_WATERMARK if wm is None else wm.output

    def assert_monotonic(self) -> None:
        self.poll()
        last: dict[tuple[str, str], int] = {}
        for v in self.history:
            for fld in ("input", "output", "input_pct", "output_pct"):
                k = (v["name"], fld)
                assert v[fld] >= last.get(k, MIN_WATERMARK), f"{k} went back: {last[k]} -> {v[fld]}"
                last[k] = v[fld]

    def close(self) -> None:
        self.feed.close()
        self._c.close()


def authority(
    stack: LocalStack, namespace: str, log_dir: Path, name: str = "authority", **extra: str
) -> WorkerProc:
    env = worker_env(stack.bootstrap, stack.redis_url, namespace, MW_AUTHORITY_BLOCK_MS="10", **extra)
    return WorkerProc("authority", env, log_dir, name, command=("authority",))


def injector(stack: LocalStack, registry: SchemaRegistry, namespace: str, **kw: Any) -> Injector:
    inj = Injector(
        bootstrap=stack.bootstrap,
        client=redis.Redis.from_url(stack.redis_url),
        registry=registry,
        name=kw.pop("name", "src"),
        outputs={"events": "mw.examples.Number"},
        namespace=namespace,
        partitions=1,
        report_interval_ms=50,
        **kw,
    )
    inj.start()
    return inj


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "logs"
    d.mkdir()
    yield d


def windows(stack: LocalStack, registry: SchemaRegistry, namespace: str) -> list[dict[str, Any]]:
    serde = AvroSerde(registry, "mw.tests.WindowCount")
    msgs = read_topic(stack.bootstrap, topic_name(namespace, "window_counts"))
    return [serde.decode(m.value) for m in msgs]


def backlog_scenario(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, backlog: bool
) -> tuple[list[dict[str, Any]], int]:
    """Returns the window outputs and the input watermark published while the
    consumer was stopped with records in its backlog."""
    extra = {} if backlog else {"MW_UNSAFE_IGNORE_BACKLOG": "1"}
    auth = authority(stack, namespace, log_dir, **extra).start()
    env = worker_env(
        stack.bootstrap, stack.redis_url, namespace, MW_WATERMARK="authority", MW_REPORT_INTERVAL_MS="50"
    )
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
        time.sleep(1.0)  # several authority steps with the backlog in place
        held = pub.input("window_count")
        worker.start()
        wait_until(
            lambda: (
                sum(w["count"] for w in windows(stack, registry, namespace) if not w["early"]) >= 11 + BACKLOG
            ),
            90,
            0.3,
            "every record to be counted in a window",
        )
        time.sleep(1.0)
        pub.assert_monotonic()
        return windows(stack, registry, namespace), held
    finally:
        inj.close()
        worker.terminate()
        auth.terminate()
        pub.close()


def test_records_in_the_backlog_hold_the_watermark_and_no_timer_fires_early(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    out, held = backlog_scenario(stack, registry, namespace, log_dir, backlog=True)
    assert held <= 5200, f"the consumer's watermark passed records still in its backlog: {held}"
    assert [w for w in out if w["early"]] == []
    counts = {(w["start"], w["count"]) for w in out}
    assert counts == {(1000, 10), (5000, 1 + BACKLOG)}, out


def test_negative_control_without_backlog_accounting_a_timer_fires_early(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    out, held = backlog_scenario(stack, registry, namespace, log_dir, backlog=False)
    assert held >= 20_000  # the watermark ran past the backlog
    early = [w for w in out if w["early"]]
    assert early, f"expected early records without backlog accounting, got {out}"


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
        time.sleep(1.0)
        return pub.output("src"), auth
    finally:
        pub.close()


def test_reports_under_a_stale_token_are_rejected(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    published, auth = zombie_injector_scenario(stack, registry, namespace, log_dir)
    pub = Published(stack.bootstrap, namespace)
    try:
        assert published == 5000
        assert auth.log_has('"report_rejected"')
        replacement = injector(stack, registry, namespace)  # the current process (a new grant)
        replacement.advance(7000)
        replacement.close()
        wait_until(lambda: pub.output("src") == 7000, 30, what="the replacement's report")
        pub.assert_monotonic()
        shown = subprocess.run(
            [sys.executable, "-m", "mwcore.cli", "watermarks", "--once"],
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


def test_negative_control_accepting_stale_tokens_lets_a_zombie_move_the_watermark(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    published, auth = zombie_injector_scenario(
        stack, registry, namespace, log_dir, MW_UNSAFE_ACCEPT_STALE_REPORTS="1"
    )
    auth.terminate()
    assert published == 9000


def test_a_missing_injector_process_holds_the_watermark(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    auth = authority(stack, namespace, log_dir).start()
    pub = Published(stack.bootstrap, namespace)
    p0 = injector(stack, registry, namespace, index=0, processes=2)
    try:
        p0.advance(5000)
        p0.report()
        time.sleep(1.0)
        assert pub.output("src") == MIN_WATERMARK  # process 1 has never reported
        p1 = injector(stack, registry, namespace, index=1, processes=2)
        p1.advance(3000)
        p1.close()  # its last word: 3000; then it is gone
        wait_until(lambda: pub.output("src") == 3000, 30, what="both processes' reports")
        p0.advance(8000)
        p0.report()
        time.sleep(1.0)
        assert pub.output("src") == 3000  # held by the missing process
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
    env = worker_env(stack.bootstrap, stack.redis_url, namespace, MW_WATERMARK="authority")
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
        first._producer.flush(30)  # acknowledged, never reported: then the process dies
        second = injector(stack, registry, namespace)  # the same process, restarted
        assert second.reported == 5000  # its promise survived
        assert second.send("events", "k", {"n": 1}, 4000)  # still late after the restart
        second.advance(20_000)
        second.flush()
        wait_until(lambda: pub.output("src") >= 20_000, 30, what="the new promise")
        time.sleep(1.0)
        assert pub.input("window_count") <= 5100  # what the first run left in Kafka holds it
        second.close()
    finally:
        worker.terminate()
        auth.terminate()
        pub.close()
