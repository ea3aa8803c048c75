"""No single record or file stops, stalls or corrupts a service (semantics I-12), on a
real broker and Redis: what the services and the ``mw`` commands meet beyond the kit's
control topics.

- the injector's directory: lines nested too deep, out of range, not UTF-8 or longer
  than a line may be, a symbolic link to a file elsewhere, a directory named like a
  log: dead letters (never the link's target), the good lines go out, the watermark
  goes on;
- records the broker refuses for good (a timestamp hours ahead, a value past
  ``message.max.bytes``), from an injector and from a computation: dead letters, and
  neither holds a watermark or the computation's output;
- the dip detector: a forged model (a period of 30,000 years, a version of 2**62) and a
  count ten years ahead cost it nothing, and a real model later is taken.

A process's surface is in ``tests/test_hostile_operations.py``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from mwcore.injector.injector import Injector
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.localproc import free_port
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import topic_name
from mwcore.transport.watermark_topic import WatermarkFeed
from testbed import wire
from testbed.hostile import dead_letter_reasons, records_in
from testbed.native import requires_native
from testbed.procs import WorkerProc, wait_until, worker_env
from testbed.topics import read_topic
from tests.conftest import ROOT
from tests.support.watermarks import authority

pytestmark = pytest.mark.hostile

HOUR_MS = 3_600_000


def _injector(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, outputs: dict[str, str], partitions: int = 1
) -> Injector:
    inj = Injector(
        bootstrap=stack.bootstrap,
        client=connect_redis(stack.redis_url),
        registry=registry,
        name="src",
        outputs=outputs,
        namespace=namespace,
        partitions=partitions,
        report_interval_ms=50,
        **wire.injector_args(stack),
    )
    inj.start()
    return inj


def _injector_watermark(feed: WatermarkFeed, name: str) -> int:
    feed.poll(0.1)
    wm = feed.get(name)
    return -1 if wm is None else wm.input


def _queries(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, stream: str
) -> list[dict[str, Any]]:
    serde = wire.serde(stack, registry, topic_name(namespace, stream), "zeitgeist.Query")
    return [serde.decode(m.value) for m in read_topic(stack.bootstrap, topic_name(namespace, stream))]


def _line(ts: int, query: str, user: int = 1) -> bytes:
    return json.dumps({"ts": ts, "query": query, "lang": "en", "user": user}).encode()


def test_hostile_files_in_the_injector_directory_are_dead_letters_and_the_injector_goes_on(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, tmp_path: Path
) -> None:
    """The injector service over a directory anyone may write: every bad line and every
    file that is not a regular one is a dead letter, a link's target is never read, the
    good lines go out once, and its watermark passes the last file."""
    logs = tmp_path / "querylogs"
    logs.mkdir()
    elsewhere = tmp_path / "private.jsonl"
    elsewhere.write_bytes(_line(2000, "TOPSECRET") + b"\n")
    far_ahead = int(time.time() * 1000) + 2 * HOUR_MS  # the broker refuses it
    (logs / "queries-000000000001000.jsonl").write_bytes(
        b"\n".join(
            [
                _line(1000, "good one"),
                b'{"ts": ' * 50_000 + b"1",  # nested too deep for the parser
                _line(1100, "huge user", user=2**64),
                b'{"ts": 1200, "query": "caf\xe9", "lang": "fr", "user": 1}',  # not UTF-8
                _line(1300, "x" * 70_000),  # longer than a line may be
                _line(far_ahead, "next year"),
                _line(2**62, "past the year 9999"),
                _line(1400, "good two"),
            ]
        )
        + b"\n"
    )
    (logs / "queries-000000000002000.jsonl").symlink_to(elsewhere)
    (logs / "queries-000000000003000.jsonl").mkdir()
    (logs / "queries-000000000004000.jsonl").write_bytes(_line(4000, "good three") + b"\n")
    env = worker_env(
        stack,
        namespace,
        MW_INJECTOR_DIR=str(logs),
        MW_INJECTOR_JITTER_MS="0",
        PYTHONPATH=str(ROOT),
    )
    auth = authority(stack, namespace, log_dir).start()
    inj = WorkerProc("", env, log_dir, "injector", command=("run",), module="services.injector").start()
    feed = WatermarkFeed(stack.bootstrap, namespace)
    try:
        wait_until(lambda: _injector_watermark(feed, "injector") >= 5000, 60, 0.2, "the injector's watermark")
        dead = dict(dead_letter_reasons(stack.bootstrap, namespace, "injector"))
        assert dead == {"malformed": 4, "refused_bad_timestamp": 1, "bad_timestamp": 1, "file_refused": 2}, (
            dead
        )
        got = sorted(q["query"] for q in _queries(stack, registry, namespace, "queries"))
        assert got == ["good one", "good three", "good two"], got
        everything = read_topic(stack.bootstrap, topic_name(namespace, "injector.dead-letters"))
        assert not any(b"TOPSECRET" in (m.value or b"") for m in everything)  # the link was not followed
        assert inj.alive, inj.logs()[-2000:]
    finally:
        feed.close()
        inj.terminate()
        auth.terminate()


def test_records_the_broker_refuses_for_good_are_dead_letters_and_hold_no_watermark(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """An injector's record dated two hours ahead and one of 1.2 MB: the broker (or the
    client) refuses them whatever the tries. Each is a dead letter, and the injector's
    watermark goes past them (it held it for ever)."""
    auth = authority(stack, namespace, log_dir).start()
    inj = _injector(stack, registry, namespace, {"events": "mw.examples.Number"})
    feed = WatermarkFeed(stack.bootstrap, namespace)
    serde = wire.serde(stack, registry, topic_name(namespace, "events"), "mw.examples.Number")
    try:
        inj.send("events", "k", {"n": 1}, 1000)
        inj.send("events", "k", {"n": 2}, int(time.time() * 1000) + 2 * HOUR_MS)
        inj.send_encoded("events", b"k", serde.encode({"n": 3}) + b"\0" * 1_200_000, 1500)
        inj.send("events", "k", {"n": 4}, 1800)
        inj.advance(3000)
        wait_until(
            lambda: (inj.poll(), _injector_watermark(feed, "src"))[1] >= 3000, 60, 0.2, "the watermark"
        )
        inj.flush()
        dead = dict(dead_letter_reasons(stack.bootstrap, namespace, "src"))
        assert dead == {"refused_bad_timestamp": 1, "refused_too_large": 1}, dead
        got = [
            serde.decode(m.value)["n"] for m in read_topic(stack.bootstrap, topic_name(namespace, "events"))
        ]
        assert sorted(got) == [1, 4], got
    finally:
        feed.close()
        inj.close()
        auth.terminate()


NO_NATIVE = requires_native


@pytest.mark.parametrize("core", ["python", pytest.param("native", marks=NO_NATIVE)])
def test_a_production_the_broker_refuses_is_a_dead_letter_and_costs_its_batchmates_nothing(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, core: str
) -> None:
    """A computation's output dated two hours ahead, between two ordinary ones of the same
    batch: the broker refuses the whole request. The one at fault becomes a dead letter,
    its batchmates come out, the checkpoint holds nothing pending, and the records after
    it come out too (it was sent again for ever). On both cores: the native one's
    producer reports a batch at once (``transport/native_producer.py``)."""
    env = worker_env(stack, namespace, MW_CORE=core)
    worker = WorkerProc("tests.support.computations:Postdate", env, log_dir, "postdate").start()
    inj = _injector(stack, registry, namespace, {"queries": "zeitgeist.Query"})
    ahead = int(time.time() * 1000) + 2 * HOUR_MS

    def send(ts: int, query: str, after_ms: int) -> None:
        inj.send("queries", query, {"query": query, "lang": "en", "user": after_ms, "source_file": "-"}, ts)

    try:
        wait_until(lambda: worker.ready, 60, what="the worker to join")
        send(1000, "a", 0)
        send(1100, "b", ahead - 1100)
        send(1200, "c", 0)
        inj.flush()
        send(1300, "d", 0)
        inj.advance(2000)
        inj.flush()
        wait_until(
            lambda: (
                {q["query"] for q in _queries(stack, registry, namespace, "postdated")} == {"a", "c", "d"}
            ),
            60,
            0.3,
            "the batchmates and the record after the refused one",
        )
        dead = dict(dead_letter_reasons(stack.bootstrap, namespace, "postdate"))
        assert dead == {"refused_bad_timestamp": 1}, dead
        r = redis.Redis.from_url(stack.redis_url)
        wait_until(lambda: r.hlen(f"mw:{{{namespace}/postdate/0}}:pending") == 0, 30, 0.2, "nothing pending")
        assert worker.alive
    finally:
        inj.close()
        worker.terminate()


def test_a_forged_model_and_a_count_ten_years_ahead_cost_the_detector_nothing(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """A ``model_updates`` record the model job could not have made (a period of 10**15
    ms, version 2**62) is a dead letter and locks nothing out: a real model after it is
    taken. A count ten years ahead is walked in bounded time: the records after it are
    processed within the minute, and the detector stays up."""
    port = free_port()
    env = worker_env(stack, namespace, MW_METRICS_PORT=str(port), PYTHONPATH=str(ROOT))
    worker = WorkerProc("services.dip_detector.computation:DipDetector", env, log_dir, "detector").start()
    inj = _injector(
        stack,
        registry,
        namespace,
        {"window_counts": "zeitgeist.WindowCount", "model_updates": "zeitgeist.ModelUpdate"},
        partitions=4,  # as the detector declares them
    )
    now = int(time.time()) * 1000

    def count(query: str, bucket: int) -> None:
        inj.send(
            "window_counts", query, {"query": query, "lang": "en", "bucket_start": bucket, "count": 5}, now
        )

    def model(period_ms: int, version: int) -> None:
        value = {
            "query": "q",
            "period_ms": period_ms,
            "profile": [5.0] * 24,
            "trained_until": version,
            "version": version,
        }
        inj.send("model_updates", "q", value, now)

    try:
        wait_until(lambda: worker.ready, 60, what="the detector to join")
        for b in range(now - 10_000, now - 5_000, 1000):
            count("q", b)
        model(10**15, 2**62)
        count("q", now + 10 * 365 * 86_400_000)
        model(86_400_000, now - 1000)
        for b in range(now - 10_000, now - 5_000, 1000):
            count("r", b)
        inj.flush()
        wait_until(lambda: records_in(port) >= 13, 60, 0.3, "the records after the far count")
        dead = read_topic(stack.bootstrap, topic_name(namespace, "dip_detector.dead-letters"))
        assert len({m.id for m in dead}) == 1 and b"model refused" in dead[0].headers["mw-error"]
        assert _detector_state(stack, namespace)["q"]["version"] == now - 1000  # the real model
        assert worker.alive
    finally:
        inj.close()
        worker.terminate()


def test_a_model_from_the_future_is_refused_and_pins_nothing(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """A ``model_updates`` record that looks like the model job's in every way but is
    stamped an hour ahead (its version, its range's end and its record's time) would pin
    the query: every genuine model after it is older. It is a dead letter (its version
    ahead of the detector's clock), and the real model after it is taken."""
    port = free_port()
    env = worker_env(stack, namespace, MW_METRICS_PORT=str(port), PYTHONPATH=str(ROOT))
    worker = WorkerProc("services.dip_detector.computation:DipDetector", env, log_dir, "detector").start()
    inj = _injector(stack, registry, namespace, {"model_updates": "zeitgeist.ModelUpdate"}, partitions=4)
    now = int(time.time()) * 1000

    def model(version: int) -> None:
        value = {"query": "q", "period_ms": 86_400_000, "profile": [5.0] * 24, "trained_until": version}
        inj.send("model_updates", "q", {**value, "version": version}, version)

    try:
        wait_until(lambda: worker.ready, 60, what="the detector to join")
        model(now + 3_600_000)  # forged: an hour ahead
        model(now - 1000)  # the model job's, after it
        inj.flush()
        wait_until(lambda: records_in(port) >= 2, 60, 0.3, "both models")
        dead = read_topic(stack.bootstrap, topic_name(namespace, "dip_detector.dead-letters"))
        assert (
            len({m.id for m in dead}) == 1
            and b"ahead of this detector's clock" in dead[0].headers["mw-error"]
        )
        assert _detector_state(stack, namespace)["q"]["version"] == now - 1000  # the real model
    finally:
        inj.close()
        worker.terminate()


def _detector_state(stack: LocalStack, namespace: str) -> dict[str, Any]:
    r = redis.Redis.from_url(stack.redis_url)
    out: dict[str, Any] = {}
    for key in r.scan_iter(match=f"mw:{{{namespace}/dip_detector/*}}:state"):
        out.update({k.decode(): json.loads(v) for k, v in r.hgetall(key).items()})
    return out


# -- a process's surface -------------------------------------------------------------------
