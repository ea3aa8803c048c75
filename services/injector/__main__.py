"""``python -m services.injector [run]`` (the injector service) or ``... generate`` (write
a scenario's query logs into a directory)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from mwcore.errors import ConfigError

if TYPE_CHECKING:
    from mwcore.runtime.injector import Injector
    from services.injector.settings import InjectorSettings


def _run() -> int:
    from mwcore.process import logs
    from mwcore.process.preflight import check_kafka, check_redis
    from mwcore.process.wiring import redis_client
    from mwcore.runtime.injector import Injector
    from mwcore.serde.avro import SchemaRegistry
    from services.injector.reader import LogReader, ReaderConfig
    from services.injector.settings import InjectorSettings

    s = InjectorSettings.load()
    logs.configure(s.log_level, s.log_format)
    check_redis(s.redis_url)
    check_kafka(s.bootstrap)
    client = redis_client(s.redis_url)
    injector = Injector(
        bootstrap=s.bootstrap,
        client=client,
        registry=SchemaRegistry.from_directory(s.schemas_dir),
        name="injector",
        outputs={"queries": "zeitgeist.Query"},
        namespace=s.namespace,
        index=s.injector_index,
        processes=s.injector_processes,
    )
    injector.start()
    liveness = _serve_metrics(s, injector)
    reader = LogReader(injector, client, ReaderConfig(s.injector_dir, s.jitter_ms))
    stopped = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while not stopped:
        liveness()
        if not reader.step():
            time.sleep(s.injector_poll_ms / 1000)
    injector.close()
    return 0


def _serve_metrics(s: InjectorSettings, injector: Injector) -> Callable[[], None]:
    """Serve /metrics and /healthz if MW_METRICS_PORT is set; the liveness tick."""
    if s.metrics_port is None:
        return lambda: None
    from mwcore.process.metrics import ProcessMetrics
    from mwcore.process.observe import instrument_injector

    metrics = ProcessMetrics(s.metrics_stall_s)
    metrics.serve(s.metrics_port, s.metrics_host)
    instrument_injector(metrics, injector)
    return metrics.liveness.tick


def _generate(args: argparse.Namespace) -> int:
    from services.injector.generator import generate
    from services.injector.scenario import Scenario

    start = args.start_ms if args.start_ms is not None else (int(time.time()) * 1000)
    scenario = Scenario(seed=args.seed, rate=args.rate, queries=args.queries)
    n = generate(Path(args.dir), scenario, start, args.seconds, realtime=not args.fast)
    print(f"wrote {n} records in {args.seconds} files to {args.dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m services.injector")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="read query logs from MW_INJECTOR_DIR into `queries`")
    gen = sub.add_parser("generate", help="write a scenario's query logs")
    gen.add_argument("--dir", required=True)
    gen.add_argument("--seconds", type=int, default=120)
    gen.add_argument("--rate", type=float, default=2000)
    gen.add_argument("--queries", type=int, default=300)
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument(
        "--start-ms", type=int, default=None, help="event time of the first second (default: now)"
    )
    gen.add_argument("--fast", action="store_true", help="write as fast as possible, not as the seconds pass")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _generate(args) if args.command == "generate" else _run()
    except ConfigError as exc:
        print(f"injector: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
