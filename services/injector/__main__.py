"""``python -m services.injector [run]`` (the injector service) or ``... generate`` (write
a scenario's query logs into a directory)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import mwcore


def _run() -> int:
    from services.injector.reader import LogReader, ReaderConfig
    from services.injector.settings import InjectorSettings

    def reader(injector: mwcore.Injector, s: InjectorSettings) -> LogReader:
        return LogReader(
            injector, ReaderConfig(s.injector_dir, s.jitter_ms, idle_s=s.injector_poll_ms / 1000)
        )

    return mwcore.run_injector("injector", {"queries": "zeitgeist.Query"}, reader, InjectorSettings)


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
    return _generate(args) if args.command == "generate" else _run()


if __name__ == "__main__":
    sys.exit(main())
