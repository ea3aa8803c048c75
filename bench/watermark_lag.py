"""Watermark lag of a three-stage pipeline at a steady rate.

Run: ``.venv/bin/python bench/watermark_lag.py [--rate 2000] [--seconds 20] [--witness-gate on|off]
[--library DIR]``; ``--library`` runs the stages and the authority on another copy of
the library (``git worktree add /tmp/base COMMIT``, then ``/tmp/base/libs/mwcore/src``),
to compare with older code.

Starts a local stack, the watermark authority and one worker per stage
(``bench/stages.py``: injector -> stage1 -> stage2 -> stage3, pass-through), then
injects records stamped with the wall clock at a steady rate; the injector's own
watermark follows the clock. Every 20 ms it samples, from the watermark topic, each
stage's input watermark and the injector's watermark, and measures how far each is
behind the wall clock. The first seconds (joining, warming up) are left out.

The last line is JSON: ``witness_gate`` (whether the stages' productions and reports
wait for the commit witness, ``MW_WITNESS_GATE``: on by default), per stage the median
and p95 lag (ms), the first stage's lag behind the injector's watermark, and
``added_lag_per_stage_ms`` (the mean, over stages 2 and 3, of how much each adds to the
median lag of the one before).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import redis

from mwcore.injector.injector import Injector
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.watermark_topic import WatermarkFeed

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("stage1", "stage2", "stage3")


def env(stack: LocalStack, namespace: str, witness_gate: bool, library: str) -> dict[str, str]:
    return {
        **os.environ,
        "MW_WITNESS_GATE": "1" if witness_gate else "0",
        "MW_BOOTSTRAP": stack.bootstrap,
        "MW_REDIS_URL": stack.redis_url,
        "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
        "MW_NAMESPACE": namespace,
        "MW_LOG_LEVEL": "warning",
        "PYTHONPATH": os.pathsep.join(p for p in (library, str(ROOT)) if p),
    }


def pct(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=2000, help="records per second")
    parser.add_argument("--seconds", type=float, default=20, help="measured seconds (after warm-up)")
    parser.add_argument("--warmup", type=float, default=8)
    parser.add_argument(
        "--witness-gate", choices=("on", "off"), default="on", help="MW_WITNESS_GATE of the stages"
    )
    parser.add_argument("--library", default="", help="the stages' and authority's library (a src dir)")
    args = parser.parse_args()
    gate = args.witness_gate == "on"
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    namespace = f"wmlag{os.getpid()}"
    with LocalStack() as stack:
        e = env(stack, namespace, gate, args.library)
        procs = [subprocess.Popen([sys.executable, "-m", "mwcore", "authority"], env=e, cwd=ROOT)]
        procs += [
            subprocess.Popen(
                [sys.executable, "-m", "mwcore", "run", f"bench.stages:{s.title()}"],
                env=e,
                cwd=ROOT,
            )
            for s in ("stage1", "stage2", "stage3")
        ]
        inj = Injector(
            bootstrap=stack.bootstrap,
            client=redis.Redis.from_url(stack.redis_url),
            registry=registry,
            name="source",
            outputs={"events": "mw.bench.Event"},
            namespace=namespace,
            linger_ms=1,
        )
        inj.start()
        feed = WatermarkFeed(stack.bootstrap, namespace)
        rng = random.Random(5)
        lags: dict[str, list[int]] = {s: [] for s in ("source", *STAGES)}
        try:
            start = time.monotonic()
            end = start + args.warmup + args.seconds
            sent = 0
            next_sample = start
            while True:
                now = time.monotonic()
                if now >= end:
                    break
                due = int((now - start) * args.rate)
                while sent < due:
                    q = f"query-{rng.randrange(1000)}"
                    inj.send(
                        "events",
                        q,
                        {"query": q, "lang": "en", "latency_us": sent},
                        time.time_ns() // 1_000_000,
                    )
                    sent += 1
                inj.advance(time.time_ns() // 1_000_000)
                if now >= next_sample:
                    next_sample = now + 0.02
                    feed.poll()
                    wall = time.time_ns() // 1_000_000
                    if now - start >= args.warmup:
                        src = feed.get("source")
                        if src is not None and src.output > 0:
                            lags["source"].append(wall - src.output)
                        for s in STAGES:
                            wm = feed.get(s)
                            if wm is not None and wm.input > 0:
                                lags[s].append(wall - wm.input)
                time.sleep(0.001)
        finally:
            inj.close()
            feed.close()
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)
    missing = [s for s, v in lags.items() if not v]
    if missing:
        raise SystemExit(f"no watermark samples for {missing}: did the stages start?")
    med = {s: statistics.median(v) for s, v in lags.items()}
    result = {
        "witness_gate": gate,
        "library": args.library or "this checkout",
        "rate_records_per_s": args.rate,
        "seconds": args.seconds,
        "lag_ms": {s: {"median": round(med[s]), "p95": pct(v, 0.95)} for s, v in lags.items()},
        "first_stage_behind_injector_ms": round(med["stage1"] - med["source"]),
        "added_lag_ms_by_stage": {
            "stage2": round(med["stage2"] - med["stage1"]),
            "stage3": round(med["stage3"] - med["stage2"]),
        },
        "added_lag_per_stage_ms": round((med["stage3"] - med["stage1"]) / 2),
    }
    for s, v in result["lag_ms"].items():  # type: ignore[attr-defined]
        print(f"{s:>8}: watermark {v['median']} ms behind wall time (p95 {v['p95']} ms)", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
