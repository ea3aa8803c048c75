"""The mixed scenario: one fault every ``--gap`` seconds while the input flows, each
kind at least once, then the input ends, the pipeline drains and ``check.py`` checks
the outputs and Redis (``suite.py`` says what each fault is and what the JSON holds)."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mwcore.cores import default_name
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.kafka_broker import KafkaBroker
from mwcore.tools.stack.kafka_cluster import KafkaCluster
from mwcore.tools.stack.localstack import LocalKafka, LocalRedis, LocalStack, RedisServer
from mwcore.tools.stack.redis_cluster import LocalRedisCluster
from mwcore.transport.topics import end_offsets, topic_name
from testbed.chaos.actors import INTERVALS, Feeder, Monitor, connect, drain_state, drained, wait_for
from testbed.chaos.check import Findings, check
from testbed.chaos.faults import Run, schedule
from testbed.chaos.links import Links
from testbed.chaos.pipeline import ChaosCount
from testbed.outside import read_committed
from testbed.procs import ROOT

_RUNS = itertools.count()


def slots(workers: int) -> tuple[str, ...]:
    """The processes that have links of their own (``--network``)."""
    return (*(f"w{k}" for k in range(workers)), "authority")


@contextlib.contextmanager
def network_stack(workers: int) -> Iterator[tuple[LocalStack, Links]]:
    """A local stack (one broker, one Redis appending every write) whose broker has a
    listener for each process's own proxy, and those proxies."""
    links = Links(slots(workers))
    broker = KafkaBroker(proxied=links.listeners())
    with LocalStack(broker=broker, redis=RedisServer(appendfsync="always")) as stack, _links(links, stack):
        yield stack, links


def run_mixed(args: argparse.Namespace, on: tuple[LocalStack, Links | None] | None = None) -> dict[str, Any]:
    """The scenario, on a stack of its own, or ``on`` one already running (the tests'
    network stack: its links reset first)."""
    if on is not None:
        stack, links = on
        if links is not None:
            links.server.reset()
        return _run_on(args, stack, links)
    if args.network:
        with network_stack(args.workers) as (stack, links):
            return _run_on(args, stack, links)
    store: LocalRedis = LocalRedisCluster() if args.redis_cluster else RedisServer(appendfsync="always")
    broker: LocalKafka = KafkaCluster(brokers=args.brokers) if args.brokers > 1 else KafkaBroker()
    with LocalStack(broker=broker, redis=store) as stack:
        return _run_on(args, stack, None)


# --delivery -> the workers' computation
COMPUTATIONS = {
    "strong": "testbed.chaos.pipeline:ChaosCount",
    "transactional": "testbed.chaos.pipeline:TransactionalChaosCount",
}


def _run_on(args: argparse.Namespace, stack: LocalStack, links: Links | None) -> dict[str, Any]:
    kinds = tuple(k for k in args.kinds.split(",") if k)
    plan = schedule(args.faults, args.seed, kinds)
    rng = random.Random(args.seed)
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    namespace = f"chaos{os.getpid()}r{next(_RUNS)}"
    log_dir = Path(tempfile.mkdtemp(prefix="mw-chaos-"))
    run_ = Run(
        stack,
        namespace,
        log_dir,
        extra_env=args.worker_env,
        links=links,
        fault_seconds=args.fault_seconds,
        partition=args.partition,
        computation=COMPUTATIONS[args.delivery],
    )
    feeder = Feeder(stack, registry, namespace, args.rate, args.seed)
    monitor = Monitor(stack.redis_url, namespace)
    try:
        run_.launch(args.workers, args.restart_after, feeder, monitor)
        first_fault = time.monotonic()
        for n, kind in enumerate(plan, 1):
            run_.inject(kind, rng, monitor)
            print(f"fault {n}/{len(plan)}: {kind} {run_.faults[-1][2]}", flush=True)
            time.sleep(args.gap * rng.uniform(0.5, 1.5))
        last_fault = run_.faults[-1][0] if run_.faults else time.monotonic()
        last_heal = run_.ends[-1] if run_.ends else time.monotonic()
        time.sleep(max(0.0, max(last_fault, last_heal) + args.settle - time.monotonic()))
        input_end = time.monotonic()
        feeder.stopping.set()
        feeder.join(180)
        if feeder.error is not None:
            raise feeder.error
        ends = end_offsets(stack.bootstrap, {topic_name(namespace, "chaos_in"): INTERVALS})
        try:
            wait_for(lambda: drained(stack, namespace, ends), 180, "the pipeline to drain")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}: {drain_state(stack, namespace, ends)}") from None
        caught_up = time.monotonic()
        time.sleep(0.5)
        monitor.stopping.set()
        monitor.join(5)
        run_.measure(monitor)
        progress = [monitor.progressed(i, last_fault) for i in range(INTERVALS)]
        after_heal = [monitor.progressed(i, last_heal) for i in range(INTERVALS)]
        stall = monitor.longest_stall(first_fault, input_end)
    finally:
        run_.halt(feeder, monitor)
    findings = check(stack, connect(stack.redis_url, 5), registry, namespace, feeder.malformed)
    outside = [read_committed(stack.bootstrap, topic_name(namespace, o.stream)) for o in ChaosCount.outputs]
    catch_up = caught_up - input_end
    result = _result(args, run_, findings, feeder, stall, progress, after_heal, catch_up, log_dir)
    # what a read_committed reader outside the kit, which drops no id, sees twice
    result["outside_duplicates"] = sum(seen.duplicates for seen in outside)
    if args.delivery == "transactional" and result["outside_duplicates"]:
        result["verdict"] = "violated"
    return result


@contextlib.contextmanager
def _links(links: Links | None, stack: LocalStack) -> Iterator[None]:
    """The processes' own proxies (``--network``), once the stack has its ports."""
    if links is None:
        yield
        return
    assert isinstance(stack.broker, KafkaBroker) and isinstance(stack.redis, RedisServer)
    links.start(stack.broker, stack.redis.port)
    try:
        yield
    finally:
        links.stop()


def _result(
    args: argparse.Namespace,
    run_: Run,
    f: Findings,
    feeder: Feeder,
    stall: float,
    progress: list[float | None],
    after_heal: list[float | None],
    catch_up: float,
    log_dir: Path,
) -> dict[str, Any]:
    outside = run_.lateness_outside_outages(f)
    return {
        "scenario": args.scenario,
        "seed": args.seed,
        "brokers": args.brokers,
        "redis_cluster": args.redis_cluster,
        "core": os.environ.get("MW_CORE") or default_name(),  # the workers' (they inherit the environment)
        "records_sent": feeder.sent,
        "malformed_sent": len(feeder.malformed),
        "late_inputs": f.late_inputs,
        "faults": dict(Counter(kind for _, kind, _ in run_.faults)),
        "checks": f.counts,
        "examples": {k: v for k, v in f.examples.items() if v},
        "longest_stall_s": round(stall, 2),
        "progress_after_last_fault_s": round(max((p if p is not None else 1e9) for p in progress), 2),
        # from when the last fault healed (a process fault: its restart done)
        "progress_after_last_heal_s": round(max((p if p is not None else 1e9) for p in after_heal), 2),
        "takeover_s": _quantiles(run_.takeover_s, 0.5, 0.95),
        "handover_s": _quantiles(run_.handover_s, 0.5, 0.95),
        "takeover_during_outage_s": _quantiles(run_.takeover_overlapped_s, 0.5),
        "outage_s": _quantiles(run_.outage_s, 0.5),
        "network": args.network,
        "delivery": args.delivery,
        # each network fault: from its heal until every interval committed again
        "recovery_after_network_fault_s": _quantiles(run_.recovery_s, 0.5, 0.95),
        "timer_lateness_ms": _quantiles([float(x) for x in f.timer_lateness_ms], 0.5, 0.99),
        "timer_lateness_outside_outages_ms": _quantiles([x for x, _ in outside], 0.5, 0.99),
        # the latest of them (due: wall clock, s) beside the faults (wall clock, s)
        "latest_timers_outside_outages": [
            {"due_s": round(due / 1000, 3), "late_ms": late} for late, due in sorted(outside)[-3:]
        ],
        "fault_times": [
            {"at_s": w, "kind": kind, "target": target}
            for w, (_, kind, target) in zip(run_.fault_walls, run_.faults, strict=True)
        ],
        "catch_up_s": round(catch_up, 2),
        "logs": str(log_dir),
        "verdict": "exactly_once" if f.ok else "violated",
    }


def _quantiles(xs: list[float], *qs: float) -> dict[str, float | None]:
    xs = sorted(xs)
    out: dict[str, float | None] = {}
    for q in qs:
        out[f"p{round(q * 100)}"] = round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None
    out["max"] = round(xs[-1], 3) if xs else None
    return out
