"""The traffic generator: writes the scenario's query logs into a directory, one file
per second, either as fast as it can (``realtime=False``) or as the seconds pass."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from services.injector.logs import file_name, record_line, write_atomically
from services.injector.scenario import Scenario, Traffic


def write_scenario(directory: Path, traffic: Traffic, seconds: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    sc = traffic.scenario
    meta = {
        "start_ms": traffic.start_ms,
        "seconds": seconds,
        "jitter_ms": sc.jitter_ms,
        "rate": sc.rate,
        "queries": sc.queries,
        "seed": sc.seed,
    }
    write_atomically(directory / "scenario.json", [json.dumps(meta)])
    end = traffic.start_ms + seconds * 1000
    rows = [json.dumps(r) for r in traffic.truth() if int(r["start"]) < end]  # type: ignore[call-overload]
    write_atomically(directory / "truth.jsonl", rows)


def generate(
    directory: Path,
    scenario: Scenario,
    start_ms: int,
    seconds: int,
    realtime: bool = True,
    stop: threading.Event | None = None,
    speed: float = 1.0,
    first: int = 0,
) -> int:
    """Write the files of seconds ``first`` to ``seconds - 1``, one as each second
    passes (``speed`` seconds of event time per wall second), or as fast as possible
    (``realtime=False``); returns how many records were written. (``first`` continues
    an earlier call's scenario.)"""
    wall_start = time.time()
    traffic = Traffic(scenario, start_ms)
    write_scenario(directory, traffic, seconds)
    written = 0
    for s in range(first, seconds):
        if stop is not None and stop.is_set():
            break
        if realtime:
            # real time follows the clock; a faster run, its own start
            due = (start_ms + (s + 1) * 1000) / 1000 if speed == 1.0 else wall_start + (s - first + 1) / speed
            delay = due - time.time()
            if delay > 0:
                if stop is not None:
                    if stop.wait(delay):
                        break
                else:
                    time.sleep(delay)
        records = traffic.second(s)
        write_atomically(directory / file_name(start_ms + s * 1000), [record_line(*r) for r in records])
        written += len(records)
    return written
