"""No single record stops, stalls or corrupts a pipeline (semantics I-12), on a real broker
and Redis: records anyone who can write a topic may write, sent to the topics the kit
reads, while the pipeline runs. Where a protection can be switched off (the pipeline
secret, ``MW_ID_SECRET``), a negative control shows the check catching the attack.

- the watermark topic: junk (not JSON, nested too deep, fields missing or of the wrong
  type, a key that is not its name) is skipped and counted; workers, the authority
  (restarted over it) and ``mw watermarks`` go on, no timer fires early;
- a well-formed watermark record forged under the computation's own name: with the
  secret it is rejected (not signed by the authority); without it (the control) the
  computation's timers fire early;
- record ids: with the secret, a record forged under a real record's id before it is a
  ``bad_id`` dead letter and the real record counts; without it (the control) the
  forged one suppresses the real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mwcore.api import ids
from mwcore.api.signing import MAC_HEADER, UNSIGNED, MacV1, Signer
from mwcore.injector.injector import Injector
from mwcore.serde.avro import AvroSerde, SchemaRegistry, decode_any
from mwcore.serde.framing import Framing
from mwcore.tools.stack.localproc import free_port
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
from mwcore.transport.topics import topic_name
from mwcore.transport.watermark_topic import WatermarkFeed, watermark_topic
from mwcore.watermarks.published import Watermarks
from testbed import wire
from testbed.hostile import SECRET, dead_letter_reasons, produce_raw, rejections
from testbed.procs import WorkerProc, wait_until, worker_env
from testbed.topics import read_topic
from tests.conftest import ROOT
from tests.support.watermarks import authority, injector, windows

pytestmark = pytest.mark.hostile

FAR = 2**62  # a watermark far past any record: every timer would fire


@dataclass
class Windows:
    """A windowed count on the authority's watermark, and its injector."""

    stack: LocalStack
    registry: SchemaRegistry
    namespace: str
    log_dir: Path
    secret: str | None
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        extra = {"MW_ID_SECRET": self.secret} if self.secret else {}
        self.signer = Signer(self.secret) if self.secret else UNSIGNED
        self.auth = authority(self.stack, self.namespace, self.log_dir, **extra).start()
        env = worker_env(
            self.stack,
            self.namespace,
            MW_WATERMARK="authority",
            MW_REPORT_INTERVAL_MS="50",
            MW_METRICS_PORT=str(self.port),
            **extra,
        )
        self.worker = WorkerProc("tests.support.windows:WindowCount", env, self.log_dir, "windower").start()
        self.inj: Injector = injector(self.stack, self.registry, self.namespace, signer=self.signer)
        self.feed = WatermarkFeed(self.stack.bootstrap, self.namespace, self.signer)

    def input_watermark(self) -> int:
        self.feed.poll(0.1)
        wm = self.feed.get("window_count")
        return -1 if wm is None else wm.input

    def send(self, *timestamps: int, advance: int) -> None:
        for ts in timestamps:
            self.inj.send("events", "k", {"n": 1}, ts)
        self.inj.advance(advance)
        self.inj.flush()

    def start(self) -> None:
        """A first window out, and one record pending in the window from 5000."""
        wait_until(lambda: self.worker.ready, 60, what="the windower to join")
        self.send(*range(1000, 2000, 100), advance=2000)
        wait_until(lambda: self.windows(), 60, 0.3, "the first window")
        self.send(5100, advance=5150)
        wait_until(lambda: self.input_watermark() >= 5150, 30, 0.1, "the watermark to reach 5150")

    def finish(self) -> list[dict[str, Any]]:
        """A second record in the window from 5000, then the watermark past it."""
        self.send(5200, advance=7000)
        wait_until(lambda: any(w["start"] == 5000 for w in self.windows()), 60, 0.3, "the window from 5000")
        return self.windows()

    def windows(self) -> list[dict[str, Any]]:
        return windows(self.stack, self.registry, self.namespace)

    def close(self) -> None:
        self.inj.close()
        self.feed.close()
        for p in (self.worker, self.auth):
            p.terminate()


def _forged_watermark(name: str) -> bytes:
    return Watermarks(name, "computation", FAR, FAR, FAR, FAR, 1).encode()


def _early(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [w for w in found if w["early"]]


def test_junk_on_the_watermark_topic_is_skipped_and_counted(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """Junk written to the watermark topic while the pipeline runs: the worker skips and
    counts it, the authority restarted over it starts and publishes, ``mw watermarks``
    shows the watermarks, and no timer fires early."""
    run = Windows(stack, registry, namespace, log_dir, secret=None)
    try:
        run.start()
        junk: list[tuple[bytes | None, bytes | None]] = [
            (b"window_count", b"not json"),
            (b"window_count", b"[" * 3000 + b"]" * 3000),
            (b"window_count", json.dumps({"kind": "computation", "input": 9}).encode()),
            (
                b"window_count",
                json.dumps({"name": "window_count", "kind": "computation", "input": "9"}).encode(),
            ),
            (b"x", _forged_watermark("window_count")),  # its key is not its name
            (b"", b"{}"),  # (no key at all the broker refuses on a compacted topic)
        ]
        produce_raw(stack.bootstrap, watermark_topic(namespace), junk)
        wait_until(lambda: sum(rejections(run.port).values()) >= len(junk), 30, 0.3, "the worker to skip it")
        run.auth.kill()
        run.auth.start(MW_AUTHORITY_BLOCK_MS="10")  # reads the topic at start: the junk too
        shown = subprocess.run(
            [sys.executable, "-m", "mwcore", "watermarks", "--once", "--namespace", namespace],
            env={**os.environ, "MW_BOOTSTRAP": stack.bootstrap},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        found = run.finish()
        assert run.worker.alive and run.auth.alive, run.auth.logs()[-2000:]
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout.splitlines()[-1])  # the watermarks, as JSON
        counted = rejections(run.port)
        assert {"not_json", "bad_name", "out_of_range", "key_mismatch"} <= set(counted), counted
        assert _early(found) == [], found
        assert {(w["start"], w["count"]) for w in found} == {(1000, 10), (5000, 2)}
    finally:
        run.close()


def _forged_watermark_scenario(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, secret: str | None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """A watermark record in the right shape under the computation's own name, claiming
    its input is complete: the windows that come out, and what the worker rejected."""
    run = Windows(stack, registry, namespace, log_dir, secret)
    try:
        run.start()
        produce_raw(
            stack.bootstrap,
            watermark_topic(namespace),
            [(b"window_count", _forged_watermark("window_count"))],
        )

        def met() -> bool:  # refused, or taken (the window from 5000 out with one record)
            return "bad_mac" in rejections(run.port) or any(w["start"] == 5000 for w in run.windows())

        wait_until(met, 30, 0.2, "the worker to meet the forged watermark")
        found = run.finish()
        return found, dict(rejections(run.port))
    finally:
        run.close()


def test_a_forged_watermark_is_refused_with_the_pipeline_secret(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    found, rejected = _forged_watermark_scenario(stack, registry, namespace, log_dir, SECRET)
    assert rejected.get("bad_mac", 0) >= 1, rejected
    assert _early(found) == [], found
    assert {(w["start"], w["count"]) for w in found} == {(1000, 10), (5000, 2)}


@pytest.mark.negative_control
def test_negative_control_without_the_secret_a_forged_watermark_fires_timers_early(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    """The same record without a pipeline secret: nothing tells it from the authority's,
    the window from 5000 fires with one record and the second comes after it."""
    found, _ = _forged_watermark_scenario(stack, registry, namespace, log_dir, None)
    assert _early(found), found


def _forged_id_scenario(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, secret: str | None
) -> tuple[dict[str, Any], dict[str, int]]:
    """A record forged under the id a real record will have (ids are predictable),
    written before it: the running sum's totals, and the dead letters by reason."""
    extra = {"MW_ID_SECRET": secret} if secret else {}
    signer = Signer(secret) if secret else UNSIGNED
    numbers = topic_name(namespace, "numbers")
    env = worker_env(stack, namespace, **extra)
    worker = WorkerProc("mwcore.examples.running_sum:RunningSum", env, log_dir, "sum").start()
    serde = wire.serde(stack, registry, numbers, "mw.examples.Number")
    try:
        wait_until(lambda: worker.ready, 60, what="the worker to join")
        real_id = ids.derive(b"a source the attacker can predict", 1)
        forged_headers = [("mw-id", real_id)]  # no MAC: it cannot make one
        produce_raw(stack.bootstrap, numbers, [(b"k", serde.encode({"n": 999}))], forged_headers)
        real_headers = [("mw-id", real_id)]
        one, ten = serde.encode({"n": 1}), serde.encode({"n": 10})
        if signer.enabled:
            real_headers.append((MAC_HEADER, signer.sign_record(real_id, numbers, b"k", one)))
        produce_raw(stack.bootstrap, numbers, [(b"k", one)], real_headers)
        produce_raw(stack.bootstrap, numbers, [(b"k", ten)], _signed(signer, numbers, b"k", ten))

        def sums() -> list[dict[str, Any]]:
            out = wire.serde(stack, registry, topic_name(namespace, "sums"), "mw.examples.Sum")
            from testbed.topics import read_topic

            return [out.decode(m.value) for m in read_topic(stack.bootstrap, topic_name(namespace, "sums"))]

        wait_until(lambda: any(s["total"] in (11, 1009) for s in sums()), 60, 0.3, "the last record's sum")
        last = max(sums(), key=lambda s: s["count"])
        return last, dict(dead_letter_reasons(stack.bootstrap, namespace, "running_sum"))
    finally:
        worker.terminate()


def _signed(signer: Signer, topic: str, key: bytes | None, value: bytes) -> list[tuple[str, bytes]]:
    rid = ids.random_id()
    mac = [(MAC_HEADER, signer.sign_record(rid, topic, key, value))] if signer.enabled else []
    return [("mw-id", rid), *mac]


def test_a_forged_record_id_is_a_dead_letter_and_the_real_record_counts(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    last, dead = _forged_id_scenario(stack, registry, namespace, log_dir, SECRET)
    assert last == {"key": "k", "total": 11, "count": 2}, last  # the real 1 and 10, not 999
    assert dead.get("bad_id") == 1, dead


@pytest.mark.negative_control
def test_negative_control_without_the_secret_a_forged_id_suppresses_the_real_record(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    last, dead = _forged_id_scenario(stack, registry, namespace, log_dir, None)
    assert last["total"] == 1009, last  # the forged 999 counted, the real 1 dropped as seen
    assert "bad_id" not in dead


def _copied_mac_scenario(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, mac_v1: MacV1
) -> tuple[dict[str, Any], dict[str, int]]:
    """A genuine (id, MAC) pair, seen on the topic, copied onto other content written
    before the real record: the running sum's last total, and its dead letters by reason."""
    signer = Signer(SECRET, mac_v1)
    numbers = topic_name(namespace, "numbers")
    env = worker_env(stack, namespace, MW_ID_SECRET=SECRET, MW_MAC_V1=mac_v1)
    worker = WorkerProc("mwcore.examples.running_sum:RunningSum", env, log_dir, "sum").start()
    serde = wire.serde(stack, registry, numbers, "mw.examples.Number")
    try:
        wait_until(lambda: worker.ready, 60, what="the worker to join")
        real, rid = serde.encode({"n": 1}), ids.random_id()
        pair = [("mw-id", rid), (MAC_HEADER, signer.sign_record(rid, numbers, b"k", real))]
        produce_raw(stack.bootstrap, numbers, [(b"k", serde.encode({"n": 999}))], pair)  # the copy
        produce_raw(stack.bootstrap, numbers, [(b"k", real)], pair)
        ten = serde.encode({"n": 10})
        produce_raw(stack.bootstrap, numbers, [(b"k", ten)], _signed(signer, numbers, b"k", ten))
        sums = wire.serde(stack, registry, topic_name(namespace, "sums"), "mw.examples.Sum")
        return _outcome(stack, namespace, sums.decode, (11, 1009))
    finally:
        worker.terminate()


def _outcome(
    stack: LocalStack, namespace: str, decode: Callable[[bytes], Any], totals: tuple[int, ...]
) -> tuple[dict[str, Any], dict[str, int]]:
    """Once a sum with one of ``totals`` is out: the running sum's last sum (the highest
    count) and its dead letters by reason."""
    sums_topic = topic_name(namespace, "sums")

    def sums() -> list[dict[str, Any]]:
        return [decode(m.value) for m in read_topic(stack.bootstrap, sums_topic)]

    wait_until(lambda: any(s["total"] in totals for s in sums()), 60, 0.3, "the last record's sum")
    last = max(sums(), key=lambda s: s["count"])
    return last, dict(dead_letter_reasons(stack.bootstrap, namespace, "running_sum"))


def test_a_copied_id_and_mac_on_other_content_is_a_dead_letter_under_mac_v2(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    last, dead = _copied_mac_scenario(stack, registry, namespace, log_dir, "off")
    assert last == {"key": "k", "total": 11, "count": 2}, last  # the real 1 and 10, not the copy's 999
    assert dead.get("bad_id") == 1, dead


@pytest.mark.negative_control
def test_negative_control_a_copied_mac_v1_suppresses_the_real_record(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    last, dead = _copied_mac_scenario(stack, registry, namespace, log_dir, "write")  # MACs of the id only
    assert last["total"] == 1009, last  # the copy counted, the real record dropped as seen
    assert "bad_id" not in dead


def _single_object_on_a_confluent_stream(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path, **extra: str
) -> tuple[dict[str, Any], dict[str, int]]:
    """A single-object record (whose fingerprint could collide with a real schema's) on
    a stream framed "confluent": the running sum's last total and its dead letters."""
    assert stack.schema_registry_url is not None
    numbers = topic_name(namespace, "numbers")
    env = worker_env(
        stack,
        namespace,
        MW_WIRE="confluent",
        **extra,
    )
    worker = WorkerProc("mwcore.examples.running_sum:RunningSum", env, log_dir, "sum").start()
    try:
        wait_until(lambda: worker.ready, 60, what="the worker to join")
        client = RegistryClient(RegistryAccess(stack.schema_registry_url))
        local = SchemaRegistry.from_directory(ROOT / "schemas")
        local.use_ids(client)  # the sums are read by their ids
        ids_ = client.deploy({numbers: local.latest("mw.examples.Number")})
        confluent = AvroSerde(local, "mw.examples.Number", framing=Framing("confluent", ids_[numbers]))
        single = AvroSerde(local, "mw.examples.Number")
        rows = [(b"k", single.encode({"n": 999})), (b"k", confluent.encode({"n": 1}))]
        produce_raw(stack.bootstrap, numbers, rows, [])
        return _outcome(stack, namespace, lambda value: decode_any(local, value)[1], (1, 1000))
    finally:
        worker.terminate()


def test_a_single_object_record_on_a_confluent_only_stream_is_a_dead_letter(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    last, dead = _single_object_on_a_confluent_stream(stack, registry, namespace, log_dir)
    assert last == {"key": "k", "total": 1, "count": 1}, last
    assert dead.get("undecodable") == 1, dead


@pytest.mark.negative_control
def test_negative_control_a_stream_that_reads_both_framings_takes_the_single_object_record(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, log_dir: Path
) -> None:
    last, dead = _single_object_on_a_confluent_stream(
        stack, registry, namespace, log_dir, MW_WIRE_READ_ALSO="single-object"
    )
    assert last["total"] == 1000, last
    assert "undecodable" not in dead
