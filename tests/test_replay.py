"""Backfill by replay: ``mw replay`` re-injects a time range of the archived
``queries`` into a namespace of its own while the live pipeline runs.

The live Zeitgeist pipeline runs over a scenario; once it is past the range, `mw
replay` sends the range's records into the namespace, where a copy of the windower,
dip detector and watermark authority runs (same code, ``MW_NAMESPACE``). Checked: the
live output is exactly what it would have been (equal to an offline recount of the
logs, anomalies as the detector's rules give on it, no replayed record in a live
topic); the namespace's window counts are the live ones for the range, its anomalies
what a pipeline given only the range finds, and the replay's watermark reached the
range's end, so every window in it was closed by the watermark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import end_offsets, topic_name
from services.dip_detector.offline import detect
from services.injector.generator import generate
from services.injector.scenario import Scenario, Traffic
from services.injector.truth import recount
from testbed.procs import Background, joined, wait_until
from testbed.topics import consumed, read_topic
from tests.conftest import ROOT
from tests.support.watermarks import Published
from tests.test_zeitgeist import decoded, services

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.slow]

SECONDS, SPEED, START_MS = 100, 5.0, 1_700_000_000_000  # the generator outlives the range by 7 s of wall time
FROM_MS, TO_MS = START_MS + 5_000, START_MS + 65_000  # a spike and a language's silence
SCENARIO = Scenario(seed=5, rate=1000, queries=150, warmup_s=5)


def test_a_replay_into_a_namespace_backfills_beside_the_live_pipeline(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    backfill = f"{namespace}-backfill"
    logs_dir = tmp_path / "querylogs"
    (tmp_path / "live").mkdir()
    (tmp_path / "backfill").mkdir()
    live = services(stack, namespace, tmp_path / "live", logs_dir)
    copy = services(stack, backfill, tmp_path / "backfill", tmp_path / "unused")
    del copy["injector"]  # the replay is the copy's injector
    pub, pub_b = Published(stack.bootstrap, namespace), Published(stack.bootstrap, backfill)
    promise = START_MS + SECONDS * 1000 - SCENARIO.jitter_ms
    try:
        for p in (*live.values(), *copy.values()):
            p.start()
        for procs in (live, copy):
            for name in ("windower", "dip_detector"):
                wait_until(lambda p=procs[name]: p.ready, 60, what=f"{name} to join")  # type: ignore[misc]
        gen = Background(generate, logs_dir, SCENARIO, START_MS, SECONDS, speed=SPEED)
        gen.start()
        wait_until(lambda: pub.output("windower") >= TO_MS, 120, 0.2, "the live pipeline past the range")
        env = {
            **os.environ,
            "MW_BOOTSTRAP": stack.bootstrap,
            "MW_REDIS_URL": stack.redis_url,
            "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
            "MW_NAMESPACE": namespace,
        }
        argv = ["--stream", "queries", "--from", str(FROM_MS), "--to", str(TO_MS), "--namespace", backfill]

        def replay() -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
            done = subprocess.run(
                [sys.executable, "-m", "mwcore", "replay", *argv],
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            return done, json.loads(done.stdout.strip().splitlines()[-1])

        assert gen.is_alive(), "the replay starts while the live pipeline is being fed"
        done, summary = replay()
        joined(gen, SECONDS / SPEED + 60, "the log generator")
        wait_until(lambda: pub.output("dip_detector") >= promise, 240, 0.5, "the live pipeline to finish")
        wait_until(lambda: pub_b.output("dip_detector") >= TO_MS - 1, 120, 0.5, "the backfill to finish")
        assert pub_b.output("replay-queries") == TO_MS
        # its promise stops at the range's end, whatever comes after it in the archive
        promised = connect_redis(stack.redis_url).get(f"mw:{{{backfill}/replay-queries/0}}:promise")
        assert promised is not None and int(promised) == TO_MS
        first_counts = decoded(stack, registry, backfill, "window_counts", "zeitgeist.WindowCount")
        _, again = replay()  # run twice (as after a crash): the copy drops every record as seen
        assert again["records"] == summary["records"]
        wait_until(lambda: consumed(stack.bootstrap, backfill, "windower", "queries"), 60, 0.5, "the re-run")
        pub.assert_monotonic()
        pub_b.assert_monotonic()
    finally:
        for p in (*live.values(), *copy.values()):
            p.terminate()
        pub.close()
        pub_b.close()
    assert "records" in done.stderr and "100%" in done.stderr  # the progress bar

    # The live pipeline: exact, and nothing of the replay in it.
    horizon = promise - 1000
    truth = recount(logs_dir, SCENARIO.jitter_ms)
    want = Counter({k: n for k, n in truth.items() if k[1] <= horizon})
    live_counts = decoded(stack, registry, namespace, "window_counts", "zeitgeist.WindowCount")
    got = Counter({(c["query"], c["bucket_start"]): c["count"] for c in live_counts})
    assert len(got) == len(live_counts) and got == want
    langs = {i.query: i.lang for i in Traffic(SCENARIO, START_MS).infos}
    key = ("query", "kind", "start", "detected_bucket")
    live_anomalies = decoded(stack, registry, namespace, "anomalies", "zeitgeist.Anomaly")
    assert {tuple(a[k] for k in key) for a in live_anomalies} == {
        tuple(a[k] for k in key) for a in detect(want, langs, horizon)
    }
    live_queries = topic_name(namespace, "queries")
    assert sum(end_offsets(stack.bootstrap, {live_queries: 4}).values()) == sum(truth.values())

    # The namespace: the live windows of the range, and what the range alone gives.
    in_range = Counter({k: n for k, n in want.items() if FROM_MS <= k[1] < TO_MS})
    assert summary["records"] == sum(in_range.values()) and summary["late"] == 0
    # the replay keeps every record's id (what makes a re-run a duplicate, not new data)
    live_ids = {m.id for m in read_topic(stack.bootstrap, live_queries) if FROM_MS <= m.timestamp < TO_MS}
    copy_msgs = read_topic(stack.bootstrap, topic_name(backfill, "queries"))
    assert {m.id for m in copy_msgs} == live_ids and len(copy_msgs) == 2 * len(live_ids)  # two runs
    copy_counts = decoded(stack, registry, backfill, "window_counts", "zeitgeist.WindowCount")
    assert copy_counts == first_counts
    got_b = Counter({(c["query"], c["bucket_start"]): c["count"] for c in copy_counts})
    assert len(got_b) == len(copy_counts) and got_b == in_range
    copy_anomalies = decoded(stack, registry, backfill, "anomalies", "zeitgeist.Anomaly")
    expected = {tuple(a[k] for k in key) for a in detect(in_range, langs, TO_MS - 1000)}
    assert expected and {tuple(a[k] for k in key) for a in copy_anomalies} == expected


def test_a_replay_into_its_own_namespace_or_of_an_unknown_stream_is_refused(
    stack: LocalStack, namespace: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mwcore.tools.cli import main

    for k, v in {
        "MW_BOOTSTRAP": stack.bootstrap,
        "MW_REDIS_URL": stack.redis_url,
        "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
        "MW_NAMESPACE": namespace,
    }.items():
        monkeypatch.setenv(k, v)
    assert main(["replay", "--stream", "queries", "--namespace", namespace]) == 2
    assert "pick another --namespace" in capsys.readouterr().err
    assert main(["replay", "--stream", "no_such", "--namespace", f"{namespace}-x"]) == 2
    assert "no such stream in namespace" in capsys.readouterr().err
    assert (
        main(["replay", "--stream", "queries", "--from", "yesterday", "--namespace", f"{namespace}-x"]) == 2
    )
    assert "ISO 8601" in capsys.readouterr().err
