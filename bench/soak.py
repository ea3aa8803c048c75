"""The soak run: the Zeitgeist pipeline at the injector's full speed for ``--seconds``.

Run: ``.venv/bin/python bench/soak.py [--seconds 600] [--queries 10]``.

Starts the local stack and every service of ``services/`` (as ``mw up`` does), with the
traffic generator kept ``--lead`` seconds of event time ahead of the injector's
watermark, so the injector always has files waiting and runs as fast as it can. Event
time starts ``--speedup`` times ``--seconds`` back from the wall clock, far enough that it
never reaches the clock (the broker refuses timestamps more than an hour ahead of it,
and an injector that caught up would go at the clock's pace from then on). Every 100 ms
it reads the watermark topic; every 10 s it counts the records injected and reads each
process's memory.

The last line is JSON: ``records``, ``rate_per_10s`` (records/s in each 10 s),
``rate_held_records_per_s`` (the median of those after the warm-up: the rate the run
held), ``event_time_ahead_of_clock`` (true if event time ever reached the wall clock:
the run did not go at full speed throughout),
``longest_watermark_stall_s`` (the longest wall time any computation's published input
watermark stood still, after the first ``--warmup`` seconds), the same per computation,
``memory_mb`` of every process at the start (after the warm-up) and at the end, and
``"verdict": "live"`` when the longest stall is at most 5 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mwcore.api.clock import MIN_WATERMARK
from mwcore.tools.stack.localproc import stop_processes
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import end_offsets, ensure_topics
from mwcore.transport.watermark_topic import WatermarkFeed
from services.injector.generator import write_scenario
from services.injector.logs import file_name, record_line, write_atomically
from services.injector.scenario import Scenario, Traffic
from services.up import PARTITIONS, service_names
from testbed.services import service_env, start_services

STREAMS = ("queries", "window_counts", "anomalies", "model_updates")
STALL_LIMIT_S = 5.0
ONE_SHOT = ("model_trainer",)  # trains once from what is archived, publishes, exits


class Generator(threading.Thread):
    """Writes the scenario's one-second files as fast as they are taken: never more
    than ``lead_s`` seconds of event time ahead of the injector's watermark."""

    def __init__(self, directory: Path, scenario: Scenario, start_ms: int, lead_s: int) -> None:
        super().__init__(daemon=True, name="generator")
        self.directory = directory
        self.traffic = Traffic(scenario, start_ms)
        self.start_ms = start_ms
        self.lead_ms = lead_s * 1000
        self.injector_wm = MIN_WATERMARK
        self.stopping = threading.Event()
        self.seconds = 0

    def run(self) -> None:
        write_scenario(self.directory, self.traffic, 10**6)
        while not self.stopping.is_set():
            next_ms = self.start_ms + self.seconds * 1000
            if next_ms - max(self.injector_wm, self.start_ms) > self.lead_ms:
                self.stopping.wait(0.05)
                continue
            records = self.traffic.second(self.seconds)
            write_atomically(self.directory / file_name(next_ms), [record_line(*r) for r in records])
            self.seconds += 1


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def longest_still(series: list[tuple[float, int]], t0: float, t1: float) -> tuple[float, float]:
    """The longest time in [t0, t1] a sampled value did not change, and when it began."""
    worst, at, since, last = 0.0, t0, t0, None
    for t, v in series:
        if t < t0 or t > t1:
            continue
        if last is not None and v != last:
            if t - since > worst:
                worst, at = t - since, since
            since = t
        last = v
    if t1 - since > worst:
        worst, at = t1 - since, since
    return worst, at


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--warmup", type=float, default=30)
    parser.add_argument("--queries", type=int, default=10, help="keys of the scenario")
    parser.add_argument("--rate", type=float, default=2000.0, help="records per event-time second")
    parser.add_argument("--lead", type=int, default=30, help="event-time seconds the files run ahead")
    parser.add_argument(
        "--speedup", type=float, default=100, help="event time starts this many run lengths back"
    )
    args = parser.parse_args()
    result = run(args)
    print(json.dumps(result))
    return 0 if result["verdict"] == "live" else 1


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="mw-soak-"))
    logs_dir = workdir / "querylogs"
    # far enough back that event time (about 20x the clock at full speed) never reaches the clock
    start_ms = (int(time.time()) - int(args.speedup * args.seconds) - 3600) * 1000
    gen = Generator(logs_dir, Scenario(queries=args.queries, rate=args.rate), start_ms, args.lead)
    series: dict[str, list[tuple[float, int]]] = {}
    rates: list[float] = []
    memory: dict[str, dict[str, float | None]] = {}
    with LocalStack(workdir=workdir) as stack:
        ensure_topics(stack.bootstrap, dict.fromkeys(STREAMS, PARTITIONS))
        env = service_env(stack, "default", logs_dir)
        procs: dict[str, subprocess.Popen[bytes]] = {}
        start_services(service_names(), env, workdir, procs)
        pids = {name: p.pid for name, p in procs.items()}
        assert stack.broker.proc is not None and stack.redis.proc is not None
        pids |= {"kafka": stack.broker.proc.pid, "redis": stack.redis.proc.pid}
        feed = WatermarkFeed(stack.bootstrap, "default")
        gen.start()
        began = time.monotonic()
        next_tick, last_count = began + 10, 0
        try:
            while time.monotonic() - began < args.seconds:
                feed.poll(0.1)
                now = time.monotonic()
                for name, wm in feed.latest.items():
                    series.setdefault(name, []).append((now, wm.input))
                inj = feed.latest.get("injector")
                if inj is not None:
                    gen.injector_wm = inj.output
                if now >= next_tick:
                    next_tick += 10
                    count = sum(end_offsets(stack.bootstrap, {"queries": PARTITIONS}).values())
                    rates.append(round((count - last_count) / 10))
                    last_count = count
                    if now - began >= args.warmup and not memory:
                        memory = {n: {"start": rss_mb(pid)} for n, pid in pids.items()}
                    dead = [n for n, p in procs.items() if p.poll() is not None and n not in ONE_SHOT]
                    print(f"{now - began:5.0f}s {count:,} records, {rates[-1]:,}/s, dead: {dead}", flush=True)
            ended = time.monotonic()
            for n, pid in pids.items():
                memory.setdefault(n, {"start": None})["end"] = rss_mb(pid)
            records = sum(end_offsets(stack.bootstrap, {"queries": PARTITIONS}).values())
        finally:
            gen.stopping.set()
            feed.close()
            stop_processes(procs.values(), 30)
    computations = {n: s for n, s in series.items() if n != "injector"}
    reached_clock = start_ms + gen.seconds * 1000 >= int(time.time() * 1000)
    held = sorted(rates[int(args.warmup // 10) :]) or [0]
    t0 = began + args.warmup
    still = {n: longest_still(s, t0, ended) for n, s in sorted(computations.items())}
    stalls = {n: round(d, 2) for n, (d, _) in still.items()}
    longest = max(stalls.values(), default=float(args.seconds))
    worst = max(still.items(), key=lambda kv: kv[1][0], default=None)
    return {
        "seconds": args.seconds,
        "queries": args.queries,
        "records": records,
        "event_seconds_generated": gen.seconds,
        "rate_per_10s": rates,
        "rate_held_records_per_s": held[len(held) // 2],
        "event_time_ahead_of_clock": reached_clock,
        "longest_watermark_stall_s": longest,
        "watermark_stall_s": stalls,
        # where the longest stall began, in seconds from the start
        "longest_stall_at_s": None if worst is None else round(worst[1][1] - began, 1),
        "memory_mb": memory,
        "logs": str(workdir),
        "verdict": "live" if computations and longest <= STALL_LIMIT_S else "stalled",
    }


if __name__ == "__main__":
    sys.exit(main())
