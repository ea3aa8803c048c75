"""The Zeitgeist injector's rate: query-log files into ``queries``, as the service reads them.

Run: ``.venv/bin/python bench/injector.py [--seconds 20] [--rate 2000] [--profile FILE]``
(``--profile``: cProfile of the reading, as ``pstats`` into FILE).

1. Starts a local stack (one broker, Redis) and writes ``--seconds`` files of the
   default scenario at ``--rate`` records per second (the service's default scenario) into
   a temporary directory, as fast as it can.
2. The injector service's reader (``services.injector.reader.LogReader`` on an
   ``mwcore.Injector`` built as the service builds it) reads them all, each file
   flushed and recorded as finished before the next: timed, with the process's CPU
   time (its Python thread and librdkafka's).
3. Checks that ``queries`` holds every line once.

The last line is JSON: ``records``, ``files``, ``records_per_s``, ``files_per_s``,
``cpu_us_per_record`` (the process: its Python thread and librdkafka's),
``main_thread_cpu_us_per_record`` (the Python thread's alone),
``broker_cpu_us_per_record`` (the broker's JVM over the same span) and
``all_written`` (true only when the topic holds as many records as the files have
lines). The generator writes one file a second: a ``files_per_s`` under 1 on a
two-core machine shared with the brokers is an injector that cannot keep up.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cpu_split import cpu_seconds
from mwcore.injector.injector import Injector
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import end_offsets, topic_name
from services.injector.generator import generate
from services.injector.reader import LogReader, ReaderConfig
from services.injector.scenario import Scenario

ROOT = Path(__file__).resolve().parent.parent
NS = "injbench"
PARTITIONS = 4


def run(seconds: int, rate: float, profile: Path | None, linger_ms: int | None = None) -> dict[str, Any]:
    scenario = Scenario(seed=1, rate=rate)
    with tempfile.TemporaryDirectory() as tmp, LocalStack() as stack:
        directory = Path(tmp)
        lines = generate(directory, scenario, (int(time.time()) - 3600) * 1000, seconds, realtime=False)
        inj = Injector(
            bootstrap=stack.bootstrap,
            client=redis_client(stack.redis_url),
            registry=SchemaRegistry.from_directory(ROOT / "schemas"),
            name="injector",
            outputs={"queries": "zeitgeist.Query"},
            namespace=NS,
            partitions=PARTITIONS,
            **({} if linger_ms is None else {"linger_ms": linger_ms}),
        )
        inj.start()
        reader = LogReader(inj, ReaderConfig(directory, lambda: scenario.jitter_ms))
        prof = cProfile.Profile() if profile else None
        broker = stack.broker.proc.pid  # type: ignore[attr-defined]  # (one local broker)
        t0, c0, th0, b0 = time.perf_counter(), time.process_time(), time.thread_time(), cpu_seconds(broker)
        if prof is not None:
            prof.enable()
        while reader.files < seconds:
            reader.step()
        if prof is not None:
            prof.disable()
            prof.dump_stats(profile)
        elapsed, cpu, thread = time.perf_counter() - t0, time.process_time() - c0, time.thread_time() - th0
        b1 = cpu_seconds(broker)
        written = sum(end_offsets(stack.bootstrap, {topic_name(NS, "queries"): PARTITIONS}).values())
        inj.close()
    return {
        "records": reader.records,
        "files": reader.files,
        "records_per_s": round(reader.records / elapsed),
        "files_per_s": round(reader.files / elapsed, 2),
        "cpu_us_per_record": round(1e6 * cpu / reader.records, 1),
        "main_thread_cpu_us_per_record": round(1e6 * thread / reader.records, 1),
        "broker_cpu_us_per_record": None
        if b0 is None or b1 is None
        else round(1e6 * (b1 - b0) / reader.records, 1),
        "all_written": written == reader.records == lines,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20, help="files (one per second of event time)")
    parser.add_argument(
        "--rate", type=float, default=2000, help="records per second of event time (the default scenario's)"
    )
    parser.add_argument("--linger-ms", type=int, help="the producer's linger.ms (default: the injector's)")
    parser.add_argument("--profile", type=Path, help="cProfile the reading into this file")
    args = parser.parse_args()
    result = run(args.seconds, args.rate, args.profile, args.linger_ms)
    print(json.dumps(result))
    return 0 if result["all_written"] else 1


if __name__ == "__main__":
    sys.exit(main())
