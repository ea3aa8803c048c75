"""``bench/chaos.py --scenario rollback``: a store that loses the tail of its writes.

Redis runs volatile (``appendfsync everysec``, accepted with
``MW_ALLOW_VOLATILE_STORE``) under the same pipeline and input as the mixed scenario.
Once every interval has committed, the suite copies Redis's append-only files; ``--lag``
seconds later it SIGKILLs Redis, puts the older copy back and starts Redis again: a
crash that lost the last seconds of acknowledged commits (what ``everysec`` can lose
to a host crash, or a restore from an older backup does).

The right outcome is a loud stop before any second payload: the workers find the store
behind the commit witness in Kafka (``mwcore/witness.py``), stop with one line naming
the interval and the gap (exit code 2), and no output id ever carries two different
payloads. With the detection turned off (``--worker-env
'{"MW_UNSAFE_IGNORE_ROLLBACK": "1"}'``) the workers resume from the older state and the
check finds ids with second, different payloads.

JSON last: ``rollback_detected``, ``all_workers_stopped`` (each worker logged the one
line and stopped, within ``--watch`` s), ``second_payloads`` (ids with two different
payloads), ``detection_s`` (from the restore to the first worker's stop), the full
checks of the mixed scenario (most fail when the pipeline stops, by design: only the
three above are the verdict), and ``"verdict": "stopped_before_second_payload"`` or
``"violated"``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from mwcore.cores import default_name
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack, RedisServer
from mwcore.transport.topics import end_offsets, topic_name
from testbed.chaos.actors import INTERVALS, Feeder, Monitor, drained, wait_for
from testbed.chaos.check import check
from testbed.chaos.faults import Run
from testbed.procs import ROOT

DETECTED = "committed checkpoints"  # in the one line a worker stops with (StoreRollbackError)


def restore_older_copy(server: RedisServer, copy: Path) -> None:
    """SIGKILL Redis, replace its append-only files with ``copy``, start it again."""
    assert server.directory is not None
    server.kill()
    live = server.directory / "appendonlydir"
    shutil.rmtree(live)
    shutil.copytree(copy, live)
    server.start()


def run_rollback(args: argparse.Namespace) -> dict[str, Any]:
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    namespace = f"chaos{os.getpid()}"
    log_dir = Path(tempfile.mkdtemp(prefix="mw-chaos-"))
    env = {"MW_ALLOW_VOLATILE_STORE": "1", **args.worker_env}
    with LocalStack(redis=RedisServer(appendfsync="everysec")) as stack:
        run_ = Run(stack, namespace, log_dir, extra_env=env)
        feeder = Feeder(stack, registry, namespace, args.rate, args.seed)
        monitor = Monitor(stack.redis_url, namespace)
        detected_at: float | None = None
        try:
            run_.launch(args.workers, args.restart_after, feeder, monitor)
            time.sleep(random.Random(args.seed).uniform(2, 4))  # windows and timers under way
            assert stack.redis.directory is not None
            copy = Path(tempfile.mkdtemp(prefix="mw-aof-")) / "appendonlydir"
            shutil.copytree(stack.redis.directory / "appendonlydir", copy)
            print(f"copied the append-only files; restoring them in {args.lag} s", flush=True)
            time.sleep(args.lag)
            with run_.lock:
                restored = time.monotonic()
                restore_older_copy(stack.redis, copy)
                run_.faults.append((restored, "store_rollback", "redis"))
            print("restored the older copy", flush=True)
            deadline = restored + args.watch
            while time.monotonic() < deadline:
                stopped = [w for w in run_.workers if DETECTED in w.logs()]
                if stopped and detected_at is None:
                    detected_at = time.monotonic()
                if len(stopped) == len(run_.workers):  # every one must stop, producing nothing
                    break
                time.sleep(0.2)
            feeder.stopping.set()
            feeder.join(180)
            if detected_at is None:  # not detected: let the pipeline finish, then check it
                ends = end_offsets(stack.bootstrap, {topic_name(namespace, "chaos_in"): INTERVALS})
                try:
                    wait_for(lambda: drained(stack, namespace, ends), 180, "the pipeline to drain")
                except TimeoutError as exc:
                    print(f"{exc}; checking what there is", flush=True)
        finally:
            run_.halt(feeder, monitor)
        stops = [w.name for w in run_.workers if DETECTED in w.logs()]
        findings = check(stack, redis.Redis.from_url(stack.redis_url), registry, namespace, feeder.malformed)
    second = findings.counts["conflicting_payloads"]
    detected = detected_at is not None
    return {
        "scenario": "rollback",
        "core": os.environ.get("MW_CORE") or default_name(),  # the workers' (they inherit the environment)
        "seed": args.seed,
        "records_sent": feeder.sent,
        "rollback_lag_s": args.lag,
        "faults": {"store_rollback": 1},
        "rollback_detected": detected,
        "detection_s": round(detected_at - restored, 2) if detected_at is not None else None,
        "stopped_workers": stops,
        "all_workers_stopped": len(stops) == len(run_.workers),
        "second_payloads": second,
        "checks": findings.counts,
        "examples": {k: v for k, v in findings.examples.items() if v},
        "logs": str(log_dir),
        "verdict": (
            "stopped_before_second_payload"
            if detected and second == 0 and len(stops) == len(run_.workers)
            else "violated"
        ),
    }
