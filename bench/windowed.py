"""The windowed workload: a one-second tumbling count per key with event-time timers.

Run: ``.venv/bin/python bench/windowed.py [--records 1000000] [--profile FILE]``
(``--profile``: py-spy samples of the worker over the timed span, summed by
``bench/profiling.py`` into the JSON's ``profile``).

1. Starts a local stack; an injector (``mwcore.injector``) writes N records
   (``mw.bench.Event``, 10,000 Zipf-skewed keys) to ``events`` (4 partitions), 10,000
   records per second of event time, each up to 2 s out of order; its watermark stays
   2 s behind the newest timestamp (the allowed lateness), so no record is late, and
   goes past the end once all are written.
2. Ceiling: a plain confluent-kafka consumer reads and Avro-decodes them all.
3. The watermark authority and one worker of ``bench.windowed_count:WindowedCount``
   (exactly-once, strong productions, one event-time timer per key and window): timed
   from its first commit until every window is on ``windows`` (records committed by
   then left out), with the worker's CPU time per record over the same span.
4. The output is checked: every (key, window) once, with the count of the input.

The last line is JSON: ``records_per_s``, ``worker_cpu_us_per_record``,
``cpu_split_us_per_record`` (the machine's CPU over the timed span, per record: the
worker, the authority, the broker, Redis, the rest, idle: ``bench/cpu_split.py``),
``raw_consume_records_per_s``, ``windows``, ``core`` (``MW_CORE``; unset: ``native``
where it is installed, else ``python``) and ``output_exact`` (true only when every
window came out once with the right count, and the counts sum to the input).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cpu_split import CpuSplit, stack_pids
from bench.profiling import Spy, breakdown
from bench.throughput import KEYS, PARTITIONS, positions, raw_consume, worker_env
from mwcore.api.signing import UNSIGNED, Signer
from mwcore.cores import default_name
from mwcore.injector.injector import Injector
from mwcore.serde.avro import SchemaRegistry
from mwcore.serde.framing import Wire
from mwcore.store.client import redis_client
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import admin_config, end_offsets, ensure_topics, topic_name
from testbed import wire
from testbed.topics import read_topic

ROOT = Path(__file__).resolve().parent.parent
NS = "windowed"
PER_SECOND = 10_000
LATENESS_MS = 2000
WINDOW_MS = 1000


def load(
    stack: LocalStack,
    registry: SchemaRegistry,
    n: int,
    namespace: str = NS,
    framed: Wire = wire.SUITE_WIRE,
    signer: Signer = UNSIGNED,
) -> Counter[tuple[str, int]]:
    """Write the records through an injector, framed ``framed`` and signed by ``signer``;
    the windows they make (key, start) -> count."""
    rng = random.Random(1)
    weights = [1 / (i + 1) ** 1.1 for i in range(KEYS)]
    keys = rng.choices([f"query-{i}" for i in range(KEYS)], weights, k=n)
    base = (int(time.time()) - 3600) * 1000
    inj = Injector(
        bootstrap=stack.bootstrap,
        client=redis_client(stack.redis_url),
        registry=registry,
        name="events_source",
        outputs={"events": "mw.bench.Event"},
        namespace=namespace,
        partitions=PARTITIONS,
        wire=framed,
        schema_registry=wire.registry_client(stack),
        signer=signer,
    )
    inj.start()
    truth: Counter[tuple[str, int]] = Counter()
    newest = base
    for i, key in enumerate(keys):
        ts = base + i * 1000 // PER_SECOND + rng.randrange(LATENESS_MS)  # up to 2 s out of order
        newest = max(newest, ts)
        inj.send("events", key, {"query": key, "lang": "en", "latency_us": i % 997}, ts)
        truth[(key, ts // WINDOW_MS * WINDOW_MS)] += 1
        if i % 10_000 == 0:
            inj.advance(newest - LATENESS_MS)
            inj.poll()
    inj.flush(120)
    inj.advance(newest + WINDOW_MS)  # past the last window
    inj.report()
    inj.flush(60)
    inj.close()
    return truth


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--profile", type=Path, help="py-spy the worker's timed span into this file")
    args = parser.parse_args()
    result = run(args.records, args.profile)
    print(json.dumps(result))
    return 0 if result["output_exact"] else 1


def run(n: int, profile: Path | None = None) -> dict[str, Any]:
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    with LocalStack() as stack:
        return run_in(stack, registry, n, NS, profile)


def run_in(
    stack: LocalStack,
    registry: SchemaRegistry,
    n: int,
    namespace: str,
    profile: Path | None = None,
    **extra_env: str,
) -> dict[str, Any]:
    """The workload in ``namespace`` of a running stack; ``extra_env`` for the worker
    (``bench/ab.py``: e.g. ``MW_CORE`` or an older library on ``PYTHONPATH``)."""
    events, windows = topic_name(namespace, "events"), topic_name(namespace, "windows")
    ensure_topics(stack.bootstrap, {events: PARTITIONS, windows: PARTITIONS})
    t0 = time.perf_counter()
    framed = wire.of(extra_env)
    truth = load(stack, registry, n, namespace, framed, wire.signer_of(extra_env))
    print(f"loaded {n:,} records, {len(truth):,} windows in {time.perf_counter() - t0:.1f} s", flush=True)
    raw = raw_consume(stack, registry, events, n, framed=framed)
    print(f"raw consume + decode: {raw:,.0f} records/s", flush=True)
    env = worker_env(stack, namespace, MW_WATERMARK="authority", **extra_env)
    auth = subprocess.Popen([sys.executable, "-m", "mwcore", "authority"], env=env, cwd=ROOT)
    worker = subprocess.Popen(
        [sys.executable, "-m", "mwcore", "run", "bench.windowed_count:WindowedCount"], env=env, cwd=ROOT
    )
    spy = Spy(worker.pid, profile) if profile else None
    split = CpuSplit({"worker": worker.pid, "authority": auth.pid, **stack_pids(stack)})
    try:
        start = None
        before = 0  # records committed at the first commit seen
        r = redis_client(stack.redis_url)
        # one admin client for the run's looks at the output (a new one a look took up
        # to seconds connecting in some runs, after the last window was out)
        admin = AdminClient(admin_config(stack.bootstrap))
        deadline = time.monotonic() + 1800
        while True:
            if start is None:
                # The first commit, looked for every 10 ms (a look at the output, an admin
                # client's round trips, would let it go unseen for a good part of a
                # small run: the span then began late, with few records and the same tail).
                if (done := sum(positions(r, namespace, events, "windowed_count"))) == 0:
                    if worker.poll() is not None or auth.poll() is not None:
                        raise RuntimeError("the worker or the authority exited")
                    if time.monotonic() > deadline:
                        raise TimeoutError("no commit after 30 minutes")
                    time.sleep(0.01)
                    continue
                start, before = time.perf_counter(), done
                split.start()
                if spy is not None:
                    spy.start()
            out = sum(end_offsets(stack.bootstrap, {windows: PARTITIONS}, admin=admin).values())
            if out >= len(truth):
                break
            if worker.poll() is not None or auth.poll() is not None:
                raise RuntimeError("the worker or the authority exited")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{out:,} of {len(truth):,} windows after 30 minutes")
            time.sleep(0.1)
        elapsed = time.perf_counter() - (start or time.perf_counter())
        split.stop()
    finally:
        if spy is not None:
            spy.stop()
        for p in (worker, auth):
            p.terminate()
            p.wait(60)
    serde = wire.serde(stack, registry, windows, "mw.bench.ChaosWindow", framed)
    seen: dict[bytes, dict[str, Any]] = {
        m.id: serde.decode(m.value) for m in read_topic(stack.bootstrap, windows)
    }
    got = Counter({(w["key"], w["start"]): w["count"] for w in seen.values()})
    once = len(seen) == len(got) == len(truth)
    timed = n - before  # the records processed after the first commit
    cpu = split.per_record(timed)
    return {
        **({"profile": breakdown(profile)} if profile and profile.exists() else {}),
        "records": n,
        # None when the first commit seen held every record (a small run, done at once)
        "records_per_s": round(timed / elapsed) if elapsed and timed > 0 else None,
        "worker_cpu_us_per_record": cpu.get("worker"),
        "cpu_split_us_per_record": cpu,
        "raw_consume_records_per_s": round(raw),
        "windows": len(seen),
        "core": extra_env.get("MW_CORE") or os.environ.get("MW_CORE") or default_name(),
        "output_exact": once and got == truth and sum(got.values()) == n,
    }


if __name__ == "__main__":
    sys.exit(main())
