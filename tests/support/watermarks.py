"""What the watermark tests share: everything the authority published, read from its
topic (``Published``), and starting an authority, an injector and a windows pipeline."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import Consumer, KafkaError, TopicPartition

from mwcore.api.clock import MIN_WATERMARK
from mwcore.injector.injector import Injector
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import consumer_config, topic_name
from mwcore.transport.watermark_topic import ensure_watermark_topic
from mwcore.watermarks.published import Watermarks
from mwcore.watermarks.report_format import NodeSpec, report_stream, stream_field, streams, topology_key
from testbed import wire
from testbed.procs import WorkerProc, wait_until, worker_env
from testbed.topics import read_topic


class Published:
    """Every value the authority published, in order, as read from the topic."""

    def __init__(self, bootstrap: str, namespace: str) -> None:
        self.topic = ensure_watermark_topic(bootstrap, namespace)
        conf = consumer_config(bootstrap, f"hist-{uuid.uuid4().hex}", **{"enable.partition.eof": True})
        self._c = Consumer(conf)
        self._tp = TopicPartition(self.topic, 0, 0)
        self._c.assign([self._tp])
        self._next = 0  # the offset after the last one read
        self.history: list[dict[str, Any]] = []
        self.latest: dict[str, Watermarks] = {}  # field-wise maximum, as a follower keeps it

    def poll(self, timeout: float = 0.05) -> None:
        for m in self._c.consume(1000, timeout):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._next = max(self._next, m.offset() or 0)
                continue
            self._next = (m.offset() or 0) + 1
            if m.value():
                self.history.append(json.loads(m.value() or b"{}"))
                wm = Watermarks.decode(m.value() or b"{}")
                old = self.latest.get(wm.name)
                self.latest[wm.name] = wm if old is None else old.merged(wm)

    def read_to_end(self, timeout: float = 60.0) -> None:
        """Read everything published up to now: up to the partition's end offset as the
        broker gives it at the call (an EOF event or a message past it)."""
        _, end = self._c.get_watermark_offsets(self._tp, timeout=10, cached=False)
        deadline = time.monotonic() + timeout
        while self._next < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.topic}: read to {self._next}, not to its end {end}, in {timeout}s")
            self.poll(0.2)

    def input(self, name: str) -> int:
        self.poll()
        wm = self.latest.get(name)
        return MIN_WATERMARK if wm is None else wm.input

    def output(self, name: str) -> int:
        self.poll()
        wm = self.latest.get(name)
        return MIN_WATERMARK if wm is None else wm.output

    def after_reports(self, r: redis.Redis, namespace: str, name: str, timeout: float = 60.0) -> Watermarks:
        """What the authority publishes for ``name`` once it has applied every report
        written so far (of every node): waits until its journal has them, then until
        it has published ``name`` after that (a change or its heartbeat). The value is
        the field-wise maximum of all published, so anything that moved shows."""
        ends = {}
        for node, raw_spec in r.hgetall(topology_key(namespace)).items():
            n = node.decode() if isinstance(node, bytes) else str(node)
            for stream in streams(NodeSpec.decode(n, raw_spec)):
                last = r.xrevrange(report_stream(namespace, *stream), count=1)
                if last:
                    ends[stream_field(stream)] = _stream_id(last[0][0])

        def applied() -> bool:
            raw = r.get(f"mw:wma:{namespace}:0")
            if raw is None:
                return False
            positions = json.loads(raw)["positions"]
            return all(_stream_id(positions.get(s, "0-0")) >= end for s, end in ends.items())

        wait_until(applied, timeout, 0.05, f"the authority to apply the reports up to {ends}")
        applied_at = time.time_ns() // 1_000_000

        def published() -> bool:
            self.poll()
            return any(v["name"] == name and v["at"] > applied_at for v in self.history)

        wait_until(published, timeout, 0.05, f"the authority to publish {name} after the reports")
        self.read_to_end()
        return self.latest[name]

    def assert_monotonic(self) -> None:
        self.read_to_end()
        last: dict[tuple[str, str], int] = {}
        for v in self.history:
            for fld in ("input", "output", "input_pct", "output_pct"):
                k = (v["name"], fld)
                assert v[fld] >= last.get(k, MIN_WATERMARK), f"{k} went back: {last[k]} -> {v[fld]}"
                last[k] = v[fld]

    def close(self) -> None:
        self._c.close()


def _stream_id(raw: bytes | str) -> tuple[int, int]:
    ms, _, seq = (raw.decode() if isinstance(raw, bytes) else raw).partition("-")
    return int(ms), int(seq or 0)


def authority(
    stack: LocalStack, namespace: str, log_dir: Path, name: str = "authority", **extra: str
) -> WorkerProc:
    env = worker_env(stack, namespace, MW_AUTHORITY_BLOCK_MS="10", **extra)
    return WorkerProc("authority", env, log_dir, name, command=("authority",))


def injector(stack: LocalStack, registry: SchemaRegistry, namespace: str, **kw: Any) -> Injector:
    inj = Injector(
        bootstrap=stack.bootstrap,
        client=connect_redis(stack.redis_url),
        registry=registry,
        name=kw.pop("name", "src"),
        outputs={"events": "mw.examples.Number"},
        namespace=namespace,
        **wire.injector_args(stack),
        **{"partitions": 1, "report_interval_ms": 50, **kw},
    )
    inj.start()
    return inj


def windows(stack: LocalStack, registry: SchemaRegistry, namespace: str) -> list[dict[str, Any]]:
    topic = topic_name(namespace, "window_counts")
    serde = wire.serde(stack, registry, topic, "mw.tests.WindowCount")
    msgs = read_topic(stack.bootstrap, topic)
    return [serde.decode(m.value) for m in msgs]
