"""The ``mw`` command."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from mwcore.errors import ConfigError


def _run(args: argparse.Namespace) -> int:
    from mwcore import logs
    from mwcore.app import build_workers, load_computation
    from mwcore.runner import Runner
    from mwcore.settings import WorkerSettings

    settings = WorkerSettings.load()
    logs.configure(settings.log_level, settings.log_format)
    cls = load_computation(args.computation)
    runner = Runner(build_workers(cls, settings))

    def _stop(signum: int, frame: FrameType | None) -> None:
        runner.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    runner.run()
    return 0


def _authority(args: argparse.Namespace) -> int:
    from mwcore import logs
    from mwcore.app import build_authority
    from mwcore.settings import AuthoritySettings

    settings = AuthoritySettings.load()
    logs.configure(settings.log_level, settings.log_format)
    authority = build_authority(settings)
    stopped = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    authority.start()
    try:
        authority.run(lambda: stopped)
    finally:
        authority.close()
    return 0


def _watermarks(args: argparse.Namespace) -> int:
    from mwcore.watermarks import view

    bootstrap = args.bootstrap or os.environ.get("MW_BOOTSTRAP")
    if not bootstrap:
        raise ConfigError("set MW_BOOTSTRAP or pass --bootstrap host:port")
    namespace = args.namespace or os.environ.get("MW_NAMESPACE", "default")
    return view.main(bootstrap, namespace, args.once, args.interval)


def _stack(args: argparse.Namespace) -> int:
    from mwcore.localstack import LocalStack

    with LocalStack() as stack:
        print(f"export MW_BOOTSTRAP={stack.bootstrap}")
        print(f"export MW_REDIS_URL={stack.redis_url}", flush=True)
        stopped = False

        def _stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopped
            stopped = True

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        deadline = time.monotonic() + args.duration if args.duration else None
        while not stopped and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.2)
    return 0


def _up(args: argparse.Namespace) -> int:
    from mwcore import up

    return up.main(args.duration, args.rate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mw", description="MillWheel-style stream processing")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one worker process of a computation")
    run.add_argument("computation", help="module:Class of the computation")
    run.set_defaults(func=_run)
    auth = sub.add_parser("authority", help="run the watermark authority (MW_* environment)")
    auth.set_defaults(func=_authority)
    wms = sub.add_parser("watermarks", help="show each computation's watermarks and lag, live")
    wms.add_argument("--bootstrap", help="Kafka bootstrap (default: $MW_BOOTSTRAP)")
    wms.add_argument("--namespace", help="namespace (default: $MW_NAMESPACE or 'default')")
    wms.add_argument("--once", action="store_true", help="print the current values as JSON and exit")
    wms.add_argument("--interval", type=float, default=0.5, help="refresh every SECONDS")
    wms.set_defaults(func=_watermarks)
    stack = sub.add_parser("stack", help="start a local broker and Redis and print their addresses")
    stack.add_argument("--duration", type=float, default=0, help="stop after this many seconds")
    stack.set_defaults(func=_stack)
    up = sub.add_parser("up", help="run the pipeline on a local broker and Redis, with a live view")
    up.add_argument("--duration", type=float, default=None, help="stop after SECONDS; print a JSON summary")
    up.add_argument("--rate", type=int, default=2000, help="records per second the generator injects")
    up.set_defaults(func=_up)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except ConfigError as exc:
        print(f"mw: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
