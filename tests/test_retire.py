"""``mw retire``: a computation stopped for good stops holding its consumers' watermarks.

The pipeline: injector ``src`` -> ``events`` -> ``forward`` (A) -> ``forwarded`` ->
``stage_count`` (B, 1 s windows on event-time timers), and a second, live writer of
``forwarded``: the injector ``side``. B is stopped while A forwards 100 records
(timestamps 3,000 to 3,099) into its backlog; then A is SIGKILLed, its input goes on
(50 records from 5,000 that it will never read), and both injectors promise 20,000.

- While A's worker runs, ``mw retire forward`` is refused: exit code 2, one line on
  stderr, no traceback.
- Without the retirement B's input watermark is held for good at A's output
  watermark, which A's unread input holds at 5,000 (the negative control of the
  liveness half shows the check failing).
- With it (the real command, in a subprocess, once A has been silent for the quiet
  period), while B is still stopped, A's records in B's backlog still hold B at
  3,000; restarted, B reads them and its watermark goes to 20,000 (the live writer's
  promise) within seconds; no window is early and every count is exact; no published
  watermark went back; ``mw watermarks`` no longer shows A. Declared again (as its
  worker does, the authority publishing once before the worker reports), A is back in
  the topology (retire is not a ban), and its watermarks never went back.
- An unknown computation is refused (exit code 2, one line).

Negative controls of the safety half: a retirement that forgets the records A left
unread (``MW_UNSAFE_RETIRE_DROPS_BACKLOG``) lets B's watermark pass them; an authority
that does not keep published values from going back (``MW_UNSAFE_PUBLISH_UNCLAMPED``)
publishes A, back from retirement, below what it had published.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mwcore.injector.injector import Injector
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.store.report_sink import RedisReportSink
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.watermark_topic import WatermarkFeed
from mwcore.watermarks.report_format import NodeSpec, retired_key, topology_key
from testbed import wire
from testbed.procs import WorkerProc, wait_until, worker_env
from tests.conftest import ROOT
from tests.support.watermarks import Published, authority, injector, windows

pytestmark = pytest.mark.watermarks

A, B = "forward", "stage_count"
LIVE_PROMISE = 20_000


def live_writer(stack: LocalStack, registry: SchemaRegistry, namespace: str) -> Injector:
    """An injector writing straight into ``forwarded``: B's other, live, input."""
    inj = Injector(
        bootstrap=stack.bootstrap,
        client=connect_redis(stack.redis_url),
        registry=registry,
        name="side",
        outputs={"forwarded": "mw.examples.Number"},
        namespace=namespace,
        partitions=2,
        report_interval_ms=50,
        **wire.injector_args(stack),
    )
    inj.start()
    return inj


def mw_retire(stack: LocalStack, namespace: str, name: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MW_BOOTSTRAP": stack.bootstrap, "MW_REDIS_URL": stack.redis_url}
    return subprocess.run(
        [sys.executable, "-m", "mwcore", "retire", name, "--namespace", namespace],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def stderr_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("%")]


@dataclass
class Observed:
    held_stopped: int = 0  # B's input, A killed, B stopped, before any retirement
    held_retired: int | None = None  # the same once A is retired (B still stopped)
    final: int = 0  # B's input, a while after B came back
    windows: list[dict[str, Any]] = field(default_factory=list)
    refused: subprocess.CompletedProcess[str] | None = None
    retired: subprocess.CompletedProcess[str] | None = None
    went_back: list[str] = field(default_factory=list)  # published watermarks that went back


def scenario(
    stack: LocalStack,
    registry: SchemaRegistry,
    namespace: str,
    log_dir: Path,
    retire: bool,
    **authority_env: str,
) -> Observed:
    seen = Observed()
    r = connect_redis(stack.redis_url)
    auth = authority(stack, namespace, log_dir, **authority_env).start()

    def monotonic() -> None:
        try:
            pub.assert_monotonic()
        except AssertionError as exc:
            seen.went_back.append(str(exc))

    env = worker_env(stack, namespace, MW_WATERMARK="authority", MW_REPORT_INTERVAL_MS="50")
    a = WorkerProc("tests.support.windows:Forward", env, log_dir, "forward")
    b = WorkerProc("tests.support.windows:StageCount", env, log_dir, "stage_count")
    pub = Published(stack.bootstrap, namespace)
    src = injector(stack, registry, namespace, partitions=2)
    side = live_writer(stack, registry, namespace)
    try:
        a.start()
        b.start()
        wait_until(lambda: a.ready and b.ready, 90, what="both workers to join")
        raw_spec = r.hget(topology_key(namespace), A)
        assert raw_spec is not None
        spec_a = NodeSpec.decode(A, raw_spec)
        for i in range(10):
            src.send("events", "k", {"n": i}, 1000 + i * 100)
        src.advance(2000)
        src.flush()
        side.advance(2000)
        side.flush()
        wait_until(lambda: pub.input(B) >= 2000, 60, what="B's watermark to reach 2000")
        assert b.terminate() == 0  # B stops; A goes on, into B's backlog
        for i in range(100):
            src.send("events", "k", {"n": i}, 3000 + i)
        src.advance(4000)
        src.flush()
        wait_until(lambda: pub.output(A) >= 4000, 60, what="A to forward and hand over its records")
        seen.refused = mw_retire(stack, namespace, A)  # A still runs
        a.kill()  # stopped for good; its input goes on
        for i in range(50):
            src.send("events", "k", {"n": i}, 5000 + i)
        src.advance(LIVE_PROMISE)
        src.flush()
        side.advance(LIVE_PROMISE)
        side.flush()
        wait_until(lambda: pub.output("side") >= LIVE_PROMISE, 30, what="the live writer's promise")
        seen.held_stopped = pub.after_reports(r, namespace, B).input
        if retire:
            deadline = time.monotonic() + 60
            while True:  # refused until A has been silent for the quiet period (15 s)
                seen.retired = mw_retire(stack, namespace, A)
                if seen.retired.returncode != 2 or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert seen.retired.returncode == 0, seen.retired.stderr
            wait_until(lambda: auth.log_has('"node_retired"'), 10, what="the authority to take it up")
            seen.held_retired = pub.after_reports(r, namespace, B).input
        b.start()
        with contextlib.suppress(TimeoutError):  # the check says where it stayed
            wait_until(
                lambda: pub.input(B) >= LIVE_PROMISE, 30, 0.2, "B's watermark to follow the live writer"
            )
        seen.final = pub.input(B)
        wait_until(
            lambda: sum(w["count"] for w in windows(stack, registry, namespace)) >= 110,
            60,
            0.3,
            "the windows of every record",
        )
        seen.windows = windows(stack, registry, namespace)
        monotonic()
        if retire:
            feed = WatermarkFeed(stack.bootstrap, namespace)  # what `mw watermarks` shows
            try:
                feed.read_to_end()
                assert A not in feed.latest and B in feed.latest
                # Started again, A is back: its declaration ends the retirement. It is
                # made here, as A's worker makes it, and the authority publishes once
                # with A declared and not yet reporting (a worker slow to start; with a
                # fast one, that moment may pass between two of the authority's steps)
                # before A's worker starts.
                RedisReportSink(r, namespace).declare(spec_a)
                wait_until(lambda: auth.log_has('"node_revived"'), 60, what="the authority to take A back")
                assert r.hexists(topology_key(namespace), A) and not r.hexists(retired_key(namespace), A)
                pub.after_reports(r, namespace, B)
                a.start()

                def shown() -> bool:
                    feed.poll(0.1)
                    return A in feed.latest

                wait_until(shown, 60, what="A's watermarks again")
                # until A has caught up (its output at the live promise), so that every
                # value published while it came back is in the history checked
                wait_until(lambda: pub.output(A) >= LIVE_PROMISE, 60, 0.2, "A to catch up")
                monotonic()  # A's and B's too: A came back with the values it had
            finally:
                feed.close()
        return seen
    finally:
        src.close()
        side.close()
        for w in (a, b, auth):
            w.terminate()
        pub.close()


def problems(seen: Observed) -> list[str]:
    """What went wrong (empty: A's unread records held B until read, and then only the
    live writer did)."""
    out = []
    if seen.held_stopped > 3000:
        out.append(
            f"B's watermark passed A's records in its backlog before the retirement: {seen.held_stopped}"
        )
    if seen.held_retired is not None and seen.held_retired > 3000:
        out.append(f"B's watermark passed A's unread records once A was retired: {seen.held_retired}")
    if seen.final < LIVE_PROMISE:
        out.append(f"B's watermark stayed at {seen.final}, its live input is at {LIVE_PROMISE}")
    early = [w for w in seen.windows if w["early"]]
    if early:
        out.append(f"{len(early)} records came after their window's timer fired (early)")
    counts = {(w["start"], w["count"]) for w in seen.windows if not w["early"]}
    if counts != {(1000, 10), (3000, 100)}:
        out.append(f"the windows are {sorted(counts)}, not [(1000, 10), (3000, 100)]")
    out += [f"a published watermark went back: {w}" for w in seen.went_back]
    return out


def test_retiring_a_stopped_computation_lets_its_consumers_watermark_advance(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    seen = scenario(stack, registry, namespace, log_dir, retire=True)
    assert problems(seen) == [], problems(seen)
    assert seen.refused is not None and seen.refused.returncode == 2
    [line] = stderr_lines(seen.refused)
    assert line.startswith(f"mw retire: refused: workers of {A} reported ") and "stop them first" in line
    assert "Traceback" not in seen.refused.stderr + seen.refused.stdout
    assert seen.retired is not None
    [done] = [ln for ln in seen.retired.stdout.splitlines() if ln.strip()]
    assert done.startswith(f"mw retire: retired {A} from namespace '{namespace}' (last heard from ")
    assert done.endswith(f"; {B} no longer waits for it beyond the records it left unread")


@pytest.mark.negative_control
def test_negative_control_without_the_retirement_the_consumer_stays_held(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """The same scenario and check, without ``mw retire``: A's last output watermark
    holds B for good."""
    seen = scenario(stack, registry, namespace, log_dir, retire=False)
    assert problems(seen) == [f"B's watermark stayed at {seen.final}, its live input is at {LIVE_PROMISE}"]
    assert seen.final <= 5000


@pytest.mark.negative_control
def test_negative_control_a_retirement_that_forgets_the_backlog_lets_the_consumer_pass_it(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """The same scenario and check, the retirement dropping what A left in B's backlog:
    once A is retired, B's watermark (B still stopped) passes A's unread records."""
    seen = scenario(stack, registry, namespace, log_dir, retire=True, MW_UNSAFE_RETIRE_DROPS_BACKLOG="1")
    found = problems(seen)
    print("negative control found:", *found, sep="\n  ")
    assert seen.held_stopped <= 3000, found  # before the retirement, the backlog held it
    assert any("passed A's unread records once A was retired" in p for p in found), found


@pytest.mark.negative_control
def test_negative_control_unclamped_watermarks_go_back_when_a_computation_returns(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """The same scenario and check, the authority publishing what it computes without
    keeping it at or above what it published: A, started again after its retirement,
    has no interval reports yet, and its watermarks are published below the values it had."""
    seen = scenario(stack, registry, namespace, log_dir, retire=True, MW_UNSAFE_PUBLISH_UNCLAMPED="1")
    found = problems(seen)
    print("negative control found:", *found, sep="\n  ")
    assert any(p.startswith("a published watermark went back:") for p in found), found


def test_an_unknown_computation_is_refused(stack: LocalStack, namespace: str) -> None:
    proc = mw_retire(stack, namespace, "nosuch")
    assert proc.returncode == 2
    assert stderr_lines(proc) == [
        f"mw retire: refused: no computation 'nosuch' in namespace '{namespace}' (known: none)"
    ]
    assert proc.stdout == ""
