"""Scaling out on one machine: records/s of 1, 2, 4, ... worker processes of one
exactly-once computation (``mw run --processes N``), with the broker and Redis on the
same machine.

Run: ``.venv/bin/python bench/scale.py [--max 8] [--records 600000] [--repeat 2]``

For each process count, a fresh namespace gets ``--records`` Avro records (10,000
Zipf-skewed keys) on a 16-partition topic, then ``mw run
bench.keyed_count:KeyedCountWide --processes N`` (a keyed count: per-key state,
dedup, a strong production per record) processes them all; timed from the first
checkpointed position to every partition's end. Over the same window it reads the CPU
time the broker (JVM), Redis and the workers used, as a share of the machine (1.0:
every core busy). The counts run ``--repeat`` times, in alternating order (1, 2, 4, 4,
2, 1), and each count's median is reported.

The last line is JSON: ``records_per_s`` and ``speedup`` (over one process) per
count, ``cpu_share`` per count and component, and ``target``: the issue's bar, the best
count at least ``0.7 * min(N, C - 1)`` times the one-process rate on C cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.*

from bench.cpu_split import cpu_seconds
from bench.throughput import load, worker_env
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics, topic_name

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 16  # KeyedCountWide.partitions
COMPUTATION = "keyed_count_wide"


def counts_up_to(limit: int) -> list[int]:
    out, n = [], 1
    while n < limit:
        out.append(n)
        n *= 2
    return [*out, limit]


def descendants(pid: int) -> list[int]:
    """``pid``'s children, grandchildren, ... (Linux /proc)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def positions(r: redis.Redis, namespace: str, topic: str) -> list[int]:
    pipe = r.pipeline(transaction=False)
    for p in range(PARTITIONS):
        pipe.hget(f"mw:{{{namespace}/{COMPUTATION}/{p}}}:pos", f"{topic}:{p}")
    return [int(v or 0) for v in pipe.execute()]


def one_run(stack: LocalStack, registry: SchemaRegistry, n: int, records: int, tag: str) -> dict[str, Any]:
    namespace = f"scale{os.getpid()}{tag}"
    topic = topic_name(namespace, "events")
    ensure_topics(stack.bootstrap, {topic: PARTITIONS})
    ends = load(stack, registry, topic, records)
    r = redis.Redis.from_url(stack.redis_url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mwcore", "run", "bench.keyed_count:KeyedCountWide", "--processes", str(n)],
        env=worker_env(stack, namespace),
        cwd=ROOT,
    )
    assert stack.broker.proc is not None and stack.redis.proc is not None  # type: ignore[attr-defined]
    broker_pid, redis_pid = stack.broker.proc.pid, stack.redis.proc.pid  # type: ignore[attr-defined]
    try:
        start = None
        while True:
            pos = positions(r, namespace, topic)
            done = sum(pos)
            if start is None and done > 0:
                workers = [proc.pid, *descendants(proc.pid)]  # the parent, or the pool's children
                cpu0 = {
                    "broker": cpu_seconds(broker_pid) or 0.0,
                    "redis": cpu_seconds(redis_pid) or 0.0,
                    "workers": sum(cpu_seconds(p) or 0.0 for p in workers),
                }
                start, start_done = time.perf_counter(), done
            if all(pos[p] >= ends.get(p, 0) for p in range(PARTITIONS)):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"the workers exited with {proc.returncode}")
            time.sleep(0.02)
        elapsed = time.perf_counter() - start  # type: ignore[operator]
        cpu1 = {
            "broker": cpu_seconds(broker_pid) or 0.0,
            "redis": cpu_seconds(redis_pid) or 0.0,
            "workers": sum(cpu_seconds(p) or 0.0 for p in workers),
        }
        cores = os.cpu_count() or 1
        return {
            "processes": n,
            "records_per_s": (sum(ends.values()) - start_done) / elapsed,
            "seconds": elapsed,
            "cpu_share": {k: round((cpu1[k] - cpu0[k]) / elapsed / cores, 3) for k in cpu0},
        }
    finally:
        proc.terminate()
        proc.wait(120)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cores = os.cpu_count() or 1
    parser.add_argument("--max", type=int, default=max(2, cores), help="the most worker processes")
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    counts = counts_up_to(args.max)
    order: list[int] = []
    for i in range(args.repeat):
        order += counts if i % 2 == 0 else list(reversed(counts))
    runs: list[dict[str, Any]] = []
    with LocalStack() as stack:
        for i, n in enumerate(order):
            run = one_run(stack, registry, n, args.records, str(i))
            print(
                f"{n} process(es): {run['records_per_s']:,.0f} records/s, cpu share {run['cpu_share']}",
                flush=True,
            )
            runs.append(run)
    rates = {n: statistics.median(r["records_per_s"] for r in runs if r["processes"] == n) for n in counts}
    shares = {
        n: {
            k: round(statistics.median(r["cpu_share"][k] for r in runs if r["processes"] == n), 3)
            for k in ("broker", "redis", "workers")
        }
        for n in counts
    }
    speedup = {n: rates[n] / rates[1] for n in counts}
    best = max(counts, key=lambda n: rates[n])
    needed = 0.7 * min(best, max(1, cores - 1))
    return {
        "cores": cores,
        "partitions": PARTITIONS,
        "records": args.records,
        "repeat": args.repeat,
        "records_per_s": {str(n): round(rates[n]) for n in counts},
        "speedup": {str(n): round(speedup[n], 2) for n in counts},
        "cpu_share": {str(n): shares[n] for n in counts},
        "target": {
            "best_processes": best,
            "best_speedup": round(speedup[best], 2),
            "needed": round(needed, 2),
            "met": speedup[best] >= needed,
        },
        "runs": runs,
    }


if __name__ == "__main__":
    print(json.dumps(main()))
