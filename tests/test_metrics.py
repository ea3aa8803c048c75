"""Observability: a worker's /metrics counts exactly what it did, and /healthz answers.

A running-sum worker serves metrics on a free port; the test feeds it good records,
re-sent duplicates and records that cannot be decoded, then scrapes. Every counter
must equal what was fed (records in, duplicates dropped, dead letters), records out
must cover every production, the latency histograms must hold every commit, and the
watermark lag must follow a watermark set by hand. A worker without MW_METRICS_PORT
listens on no port, a stalled loop turns /healthz to 503, and a port already taken
stops the worker at start with a message that names the setting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.localstack import LocalStack, free_port
from mwcore.transport.topics import ensure_topics
from testbed.procs import listening_ports, wait_until
from testbed.wire import source_writer
from tests.conftest import ROOT
from tests.support.computations import STALL_N
from tests.support.running_sum import Deployment

pytestmark = pytest.mark.observability


def scrape(port: int) -> dict[tuple[str, str], float]:
    """(sample name, computation label) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "le" not in s.labels:
                out[(s.name, s.labels.get("computation", ""))] = s.value
    return out


def test_worker_metrics_count_what_it_did(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    dep = Deployment.on(stack, namespace, tmp_path)
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    good, dups, bad = 2_000, 150, 7
    ids = [i.to_bytes(16, "big") for i in range(good)]
    for i, rid in enumerate(ids):
        writer.write(f"key-{i % 40}", {"n": 1}, 1_000 + i, rid)
    writer.flush()
    worker = dep.add_worker("m0").start(MW_METRICS_PORT=str(port), MW_METRICS_HOST="127.0.0.1")
    dep.wait_caught_up(writer.end_offsets, timeout=120)
    for i in range(dups):  # the same ids again: dropped as duplicates
        writer.write(f"key-{i % 40}", {"n": 1}, 1_000 + i, ids[i])
    for i in range(bad):
        writer.write_raw(b"key-0", b"\x00\x01 not avro", 5_000 + i, (10**9 + i).to_bytes(16, "big"))
    writer.flush()
    dep.wait_caught_up(writer.end_offsets, timeout=120)
    wm = time.time_ns() // 1_000_000 - 5_000
    connect_redis(stack.redis_url).set(f"mw:wm:{namespace}:running_sum", wm)

    def settled() -> bool:
        m = scrape(port)
        return (
            m.get(("mw_records_in_total", "running_sum")) == good
            and m.get(("mw_dead_letters_total", "running_sum")) == bad
            and m.get(("mw_watermark_ms", "running_sum")) == wm
        )

    try:
        wait_until(settled, 30, 0.5, "the counters to settle")
        m = scrape(port)
        name = "running_sum"
        assert m[("mw_duplicates_dropped_total", name)] == dups
        assert m[("mw_records_out_total", name)] >= good  # one sum per record, plus totals
        assert m[("mw_commits_total", name)] >= 1
        assert m[("mw_batch_seconds_count", name)] == m[("mw_commits_total", name)]
        assert m[("mw_commit_seconds_count", name)] == m[("mw_commits_total", name)]
        assert m[("mw_fenced_commits_total", name)] == 0
        assert m[("mw_intervals_owned", name)] == 4
        assert 4.0 <= m[("mw_watermark_lag_seconds", name)] < 60.0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            assert resp.status == 200
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing", timeout=5)
        assert missing.value.code == 404

        # The port is now taken: a second worker asked to serve on it refuses to start.
        second = dep.add_worker("m1").start(MW_METRICS_PORT=str(port), MW_METRICS_HOST="127.0.0.1")
        assert second.proc is not None
        assert second.proc.wait(60) != 0
        assert f"MW_METRICS_PORT={port}" in second.current_log()
    finally:
        worker.terminate()


def test_no_metrics_port_serves_nothing(stack: LocalStack, namespace: str, tmp_path: Path) -> None:
    """A worker without MW_METRICS_PORT listens on no port at all; the same check finds
    the one port of a worker with MW_METRICS_PORT=0 (a free port), which serves metrics."""
    dep = Deployment.on(stack, namespace, tmp_path)
    quiet = dep.add_worker("q0").start()
    served = dep.add_worker("q1").start(MW_METRICS_PORT="0", MW_METRICS_HOST="127.0.0.1")
    try:
        for w in (quiet, served):
            wait_until(lambda w=w: w.ready, 60, 0.2, f"{w.name} to take its intervals")  # type: ignore[misc]
        assert listening_ports(quiet.pid) == set(), quiet.current_log()
        [port] = listening_ports(served.pid)
        assert f"127.0.0.1:{port}/metrics" in served.current_log()
        assert ("mw_intervals_owned", "running_sum") in scrape(port)
    finally:
        quiet.terminate()
        served.terminate()


def test_healthz_turns_503_while_the_loop_stalls(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """User code hangs on one record: /healthz answers 503 once the loop has not turned
    for MW_METRICS_STALL_S, and 200 again once it turns (metrics are served throughout)."""
    release = tmp_path / "release"
    dep = Deployment.on(
        stack,
        namespace,
        tmp_path,
        computation="tests.support.computations:StallingSum",
        worker_env={"MW_TEST_RELEASE": str(release)},
    )
    port = free_port()
    worker = dep.add_worker("h0").start(
        MW_METRICS_PORT=str(port), MW_METRICS_HOST="127.0.0.1", MW_METRICS_STALL_S="2"
    )
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")

    def health() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        wait_until(lambda: worker.ready, 60, 0.2, "the worker to take its intervals")
        wait_until(lambda: health() == 200, 30, 0.2, "/healthz to answer 200")
        writer.write("key-0", {"n": STALL_N}, 1_000, b"\x01" * 16)
        writer.flush()
        wait_until(lambda: health() == 503, 60, 0.2, "/healthz to answer 503 while the loop stalls")
        assert worker.alive
        assert ("mw_intervals_owned", "running_sum") in scrape(port)  # the server still answers
        release.touch()
        wait_until(lambda: health() == 200, 60, 0.2, "/healthz to answer 200 once the loop turns again")
        writer.write("key-0", {"n": 5}, 1_001, b"\x02" * 16)
        writer.flush()
        dep.wait_caught_up(writer.end_offsets, timeout=60)
        assert dep.state()["key-0"]["total"] == 5
    finally:
        release.touch()
        worker.terminate()


def test_mw_tail_prints_a_stream_decoded(stack: LocalStack, registry: SchemaRegistry, namespace: str) -> None:
    topic = f"{namespace}.numbers"
    ensure_topics(stack.bootstrap, {topic: 2})
    writer = source_writer(stack, registry, topic, "mw.examples.Number")
    for i in range(30):
        writer.write(f"key-{i % 3}", {"n": i}, 1_000 + i, i.to_bytes(16, "big"))
    writer.write_raw(b"key-0", b"not avro", 2_000, b"\xff" * 16)
    writer.flush()

    def mw_tail(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mwcore", "tail", *args, "--namespace", namespace],
            env={**os.environ, "MW_BOOTSTRAP": stack.bootstrap, "MW_SCHEMAS_DIR": str(ROOT / "schemas")},
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = mw_tail("numbers", "--from-beginning", "--no-follow")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 31
    avro = sorted((r for r in rows if r["schema"]), key=lambda r: r["timestamp"])
    assert [r["value"]["n"] for r in avro] == list(range(30))
    assert {r["id"] for r in avro} == {i.to_bytes(16, "big").hex() for i in range(30)}
    assert all(r["schema"] == "mw.examples.Number" and r["stream"] == "numbers" for r in avro)
    raw = [r for r in rows if not r["schema"]]
    assert [(r["value"], r["key"]) for r in raw] == [("not avro", "key-0")]

    last = mw_tail("numbers", "-n", "2", "--no-follow")  # the last two of each partition
    assert last.returncode == 0, last.stderr
    assert len(last.stdout.splitlines()) == 4

    unknown = mw_tail("no-such-stream", "--no-follow")
    assert unknown.returncode == 2
    assert "no stream 'no-such-stream'" in unknown.stderr


def _health(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:  # not listening yet
        return 0, str(exc)


STALL_S = 3  # the worker's MW_METRICS_STALL_S


def _health_through_a_redis_restart(
    stack: LocalStack,
    registry: SchemaRegistry,
    namespace: str,
    tmp_path: Path,
    until: Callable[[list[tuple[int, str]], list[int], float], bool],
    **env: str,
) -> list[tuple[int, str]]:
    """A worker (``MW_METRICS_STALL_S=3``) with input coming at 500 records/s; Redis
    restarted under it. Returns every /healthz answer after the restart, sampled until
    ``until(answers, commits since the restart per interval, seconds since it)`` holds
    (at most 60 s)."""
    from tests.support.running_sum import Injector, make_inputs

    dep = Deployment.on(stack, namespace, tmp_path, worker_env=dict(env))
    port = free_port()
    worker = dep.add_worker("h0").start(
        MW_METRICS_PORT=str(port), MW_METRICS_HOST="127.0.0.1", MW_METRICS_STALL_S=str(STALL_S)
    )
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, make_inputs(60_000, 100, dup_rate=0.0, seed=5), rate=500)
    injector.start()
    answers = []
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 60, 0.2, "two checkpoints per interval")
        wait_until(lambda: _health(port)[0] == 200, 30, 0.2, "/healthz to answer 200")
        before = dep.commits()
        stack.redis.stop()
        stack.redis.start()
        restarted = time.monotonic()
        while True:
            answers.append(_health(port))
            since = [now - then for now, then in zip(dep.commits(), before, strict=True)]
            elapsed = time.monotonic() - restarted
            if until(answers, since, elapsed) or elapsed > 60:
                break
            time.sleep(0.5)
    finally:
        injector.release.set()
        worker.terminate()
    return answers


@pytest.mark.fencing
def test_healthz_names_an_interval_that_stopped_progressing(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """Intervals fenced by a Redis restart and never taken back (``MW_UNSAFE_NO_RETAKE``:
    the kind of stall issue 14 found) while their input keeps coming: the loop turns,
    but /healthz answers 503 and names an interval and the records waiting."""
    answers = _health_through_a_redis_restart(
        stack,
        registry,
        namespace,
        tmp_path,
        lambda answers, _, __: answers[-1][0] == 503,
        MW_UNSAFE_NO_RETAKE="1",
    )
    stuck = [body for code, body in answers if code == 503]
    assert stuck and "has not committed for" in stuck[-1] and "records wait" in stuck[-1], answers


@pytest.mark.fencing
def test_healthz_stays_ok_when_the_worker_takes_its_intervals_back(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The same restart with the intervals taken back at once: no false alarm (the
    control that the rule above reacts to the stall, not to the restart), sampled until
    every interval has committed twice since the restart and twice the stall threshold
    has passed (a false alarm can only come while an interval has not committed)."""

    def recovered(answers: list[tuple[int, str]], since: list[int], elapsed: float) -> bool:
        return min(since) >= 2 and elapsed >= 2 * STALL_S

    answers = _health_through_a_redis_restart(stack, registry, namespace, tmp_path, recovered)
    assert all(code == 200 for code, _ in answers), answers
    assert len(answers) >= 2 * STALL_S, answers  # sampled through the whole window
