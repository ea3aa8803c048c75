"""Where a record's latency goes on the local Apache Kafka stack.

Run: ``.venv/bin/python bench/latency_breakdown.py [--rate 10000] [--seconds 10]``.

1. Kafka alone: a producer process and a consumer process (the kit's configs) at a
   steady rate into a topic with ``LogAppendTime``: produce to append (broker time
   minus the send time carried in the value) and append to consume.
2. Idle consumers: the broker's CPU while three consumers wait on an empty topic,
   with ``fetch.wait.max.ms`` 10 (the old setting) and 500 (the kit's).
3. The worker: ``bench/keyed_count.py`` fed at a steady rate; its own histograms
   (``mw_batch_seconds``: first record of a batch to its commit; ``mw_commit_seconds``:
   the commit call) and the commit script's time inside Redis (``INFO
   commandstats``), beside the commit latency per record.

Prints the figures; the last line is a JSON object with all of them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.throughput import PARTITIONS, feed_steadily, worker_env
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localproc import free_port
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import consumer_config, ensure_topics, producer_config, topic_name

ROOT = Path(__file__).resolve().parent.parent


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * q))], 1)


def _consume(bootstrap: str, topic: str, n: int, out: Any) -> None:
    c = Consumer(consumer_config(bootstrap, f"lat-{topic}"))
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    to_append: list[float] = []
    to_consume: list[float] = []
    while len(to_consume) < n:
        for m in c.consume(5000, 0.005):
            if m.error() is None:
                now = time.time() * 1000
                appended = m.timestamp()[1]
                to_append.append(appended - struct.unpack("d", m.value() or b"")[0])
                to_consume.append(now - appended)
    c.close()
    out.put((to_append, to_consume))


def kafka_alone(stack: LocalStack, rate: int, seconds: int) -> dict[str, float]:
    topic = "latency-kafka"
    ensure_topics(stack.bootstrap, {topic: PARTITIONS}, config={"message.timestamp.type": "LogAppendTime"})
    n = rate * seconds
    out: Any = mp.Queue()
    reader = mp.Process(target=_consume, args=(stack.bootstrap, topic, n, out))
    reader.start()
    time.sleep(3)  # the reader has its partitions
    producer = Producer(producer_config(stack.bootstrap, **{"linger.ms": 1}))
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            producer.poll(0)
            time.sleep(delay)
        producer.produce(topic, struct.pack("d", time.time() * 1000), str(i % 1000).encode())
    producer.flush(30)
    to_append, to_consume = out.get(timeout=120)
    reader.join(30)
    half = n // 2  # the broker warm
    return {
        "produce_to_append_median_ms": _pct(to_append[half:], 0.5),
        "produce_to_append_p99_ms": _pct(to_append[half:], 0.99),
        "append_to_consume_median_ms": _pct(to_consume[half:], 0.5),
        "append_to_consume_p99_ms": _pct(to_consume[half:], 0.99),
    }


def idle_consumers(stack: LocalStack, wait_ms: int, seconds: float = 10) -> float:
    """The broker's CPU (% of a core) while three consumers wait on an empty topic."""
    topic = f"idle-{wait_ms}"
    ensure_topics(stack.bootstrap, {topic: PARTITIONS})
    consumers = []
    for i in range(3):
        conf = consumer_config(stack.bootstrap, f"idle-{wait_ms}-{i}", None, **{"fetch.wait.max.ms": wait_ms})
        c = Consumer(conf)
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        consumers.append(c)
    assert stack.broker.proc is not None
    pid = stack.broker.proc.pid
    began, cpu = time.monotonic(), _cpu_s(pid)
    while time.monotonic() - began < seconds:
        for c in consumers:
            c.consume(100, 0.005)
    used = (_cpu_s(pid) - cpu) / (time.monotonic() - began) * 100
    for c in consumers:
        c.close()
    return round(used)


def _histogram_mean(text: str, name: str) -> float:
    total = float(re.search(rf"^{name}_sum\S* (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    count = float(re.search(rf"^{name}_count\S* (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]
    return round(total / count * 1000, 2) if count else 0.0


def worker(stack: LocalStack, rate: int, seconds: int) -> dict[str, float]:
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    namespace = f"brk{os.getpid()}"
    topic = topic_name(namespace, "events")
    ensure_topics(stack.bootstrap, {topic: PARTITIONS})
    out = Path(tempfile.mkdtemp()) / "latency.json"
    port = free_port()
    env = worker_env(stack, namespace, MW_LATENCY_OUT=str(out), MW_METRICS_PORT=str(port))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mwcore", "run", "bench.keyed_count:KeyedCount"],
        env={**env, "MW_METRICS_HOST": "127.0.0.1"},
        cwd=ROOT,
    )
    r = redis.Redis.from_url(stack.redis_url)
    try:
        # the script's time in Redis counted from the steady phase on
        feed_steadily(stack, registry, namespace, topic, rate, seconds, on_warm=r.config_resetstat)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        script = r.info("commandstats").get("cmdstat_evalsha", {})
    finally:
        proc.terminate()
        proc.wait(60)
    samples = [float(x) for x in json.loads(out.read_text())["samples_ms"][1:]]
    return {
        "worker_latency_median_ms": _pct(samples, 0.5),
        "worker_latency_p99_ms": _pct(samples, 0.99),
        "batch_first_record_to_commit_mean_ms": _histogram_mean(metrics, "mw_batch_seconds"),
        "commit_call_mean_ms": _histogram_mean(metrics, "mw_commit_seconds"),
        "commit_script_in_redis_ms": round(float(script.get("usec_per_call", 0)) / 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    with LocalStack() as stack:
        result: dict[str, Any] = {"rate_records_per_s": args.rate}
        result.update(kafka_alone(stack, args.rate, args.seconds))
        print(f"Kafka alone: {result}", flush=True)
        result["idle_consumers_broker_cpu_pct"] = {
            "fetch_wait_10ms": idle_consumers(stack, 10),
            "fetch_wait_500ms": idle_consumers(stack, 500),
        }
        print(f"3 idle consumers, broker CPU: {result['idle_consumers_broker_cpu_pct']}", flush=True)
        result.update(worker(stack, args.rate, args.seconds))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
