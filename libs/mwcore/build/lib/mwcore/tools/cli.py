"""The ``mw`` command."""

from __future__ import annotations

import argparse
import functools
import signal
import time
from collections.abc import Sequence
from types import FrameType

from mwcore.errors import ConfigError
from mwcore.process.settings import CommandSettings, check_namespace


@functools.cache
def _env() -> CommandSettings:
    """What a command falls back on (``MW_BOOTSTRAP``, ...), read once."""
    return CommandSettings.load()


def _namespace_arg(value: str) -> str:
    try:
        return check_namespace(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _namespace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace", type=_namespace_arg, help="namespace (default: $MW_NAMESPACE or 'default')"
    )


def _namespace(args: argparse.Namespace) -> str:
    """--namespace, else $MW_NAMESPACE, else 'default'."""
    return str(args.namespace or _env().namespace)


def _run(args: argparse.Namespace) -> int:
    from mwcore.process.run import run_computation

    return run_computation(args.computation, processes=args.processes)


def _authority(args: argparse.Namespace) -> int:
    from mwcore.process.run import run_authority

    return run_authority()


def _bootstrap(args: argparse.Namespace) -> str:
    """--bootstrap, else $MW_BOOTSTRAP, else the broker of a running `mw up`."""
    from mwcore.tools.up.runner import running

    bootstrap = args.bootstrap or _env().bootstrap or running().get("bootstrap")
    if not bootstrap:
        raise ConfigError("no broker: pass --bootstrap host:port, set MW_BOOTSTRAP, or start `mw up`")
    return str(bootstrap)


def _schemas_dir(args: argparse.Namespace) -> str:
    """--schemas, else $MW_SCHEMAS_DIR, else a running `mw up`'s, else the project's
    ([tool.mw] schemas), else ./schemas."""
    from pathlib import Path

    from mwcore.tools.project import find_project
    from mwcore.tools.up.runner import running

    schemas = args.schemas or _env().schemas_dir or running().get("schemas_dir")
    if not schemas:
        project = find_project()
        schemas = str(project.schemas) if project is not None else "schemas"
    if not Path(schemas).is_dir():
        raise ConfigError(f"no schemas directory {schemas!r}: pass --schemas DIR or set MW_SCHEMAS_DIR")
    return str(schemas)


def _redis_url(args: argparse.Namespace) -> str:
    """--redis-url, else $MW_REDIS_URL, else the Redis of a running `mw up`."""
    from mwcore.tools.up.runner import running

    redis_url = args.redis_url or _env().redis_url or running().get("redis_url")
    if not redis_url:
        raise ConfigError(
            "no Redis: pass --redis-url redis://host:port/0, set MW_REDIS_URL, or start `mw up`"
        )
    return str(redis_url)


def _watermarks(args: argparse.Namespace) -> int:
    from mwcore.tools import watermarks_view as view

    namespace = _namespace(args)
    return view.main(_bootstrap(args), namespace, args.once, args.interval, signer=_env().signer())


def _tail(args: argparse.Namespace) -> int:

    from mwcore.serde.avro import SchemaRegistry
    from mwcore.tools.tail import tail
    from mwcore.transport.schema_topic import SchemaTopic

    bootstrap = _bootstrap(args)
    namespace = _namespace(args)
    registry = SchemaRegistry.from_directory(_schemas_dir(args))
    registry.use_source(SchemaTopic(bootstrap, namespace))  # writers newer than the directory
    tail(
        bootstrap,
        args.stream,
        registry,
        namespace=namespace,
        last=args.lines,
        from_beginning=args.from_beginning,
        follow=not args.no_follow,
        limit=args.max,
    )
    return 0


def _stack(args: argparse.Namespace) -> int:
    from mwcore.tools.stack.builder import local_stack

    with local_stack(brokers=args.brokers, redis_cluster=args.redis_cluster) as stack:
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


def _new_service(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mwcore.tools.scaffold import find, new_service

    project = find(Path(args.root) if args.root else None)
    root = project.root
    written = new_service(args.name, project, input_stream=args.input, input_schema=args.input_schema)
    for path in written:
        print(
            f"created {path.relative_to(root)}"
            if path.name != "docker-compose.yml"
            else f"updated {path.name}"
        )
    module = f"{project.package}.{args.name}"
    steps = [
        (f"pytest {(project.services_dir / args.name).relative_to(root)}", "its unit test, in memory"),
        (f"python -m {module}", "one worker (MW_BOOTSTRAP, MW_REDIS_URL, MW_SCHEMAS_DIR)"),
        (f"mw tail {args.name}_counts", "its output, decoded"),
        ("mw watermarks", "its watermark, once it runs"),
    ]
    if (root / "docker-compose.yml").exists():
        steps.append((f"docker compose up -d --build {args.name}", "or as a container beside the others"))
    print("\nnext:")
    for cmd, what in steps:
        print(f"  {cmd:<48} # {what}")
    return 0


def _batch_defaults(args: argparse.Namespace) -> tuple[list[str], str]:
    """--computations and --input, else the project's [tool.mw.batch]."""
    from mwcore.tools.project import find_project

    project = find_project() if args.computations is None or args.input is None else None
    batch = project.batch if project is not None else None
    computations = args.computations or ",".join(batch.computations if batch else ())
    if not computations:
        raise ConfigError(
            "no computations to run: pass --computations module:Class[,...] or set computations "
            "in the [tool.mw.batch] table of the project's pyproject.toml"
        )
    inputs = args.input or ",".join(batch.inputs if batch else ())
    if not inputs:
        raise ConfigError(
            "no stream to read: pass --input STREAM[,...] or set inputs "
            "in the [tool.mw.batch] table of the project's pyproject.toml"
        )
    return computations.split(","), inputs


def _batch(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from mwcore.archive.spark.batch import decode_frame, run_pipeline
    from mwcore.archive.spark.session import spark_session
    from mwcore.archive.spark.source import read_archive
    from mwcore.serde.avro import SchemaRegistry

    computations, inputs = _batch_defaults(args)
    bootstrap = _bootstrap(args)
    schemas = _schemas_dir(args)
    registry = SchemaRegistry.from_directory(schemas)
    options = {}
    if args.from_ms is not None:
        options["startingTimestamp"] = str(args.from_ms)
    if args.to_ms is not None:
        options["endingTimestamp"] = str(args.to_ms)
    namespace = _namespace(args)
    with spark_session(args.master) as spark:
        archive = read_archive(spark, bootstrap, inputs, namespace, schemas, **options)
        outputs = run_pipeline(archive, computations, registry)
        summary = {}
        for stream, (frame, schema) in outputs.items():
            table = decode_frame(frame, stream, schema, registry)
            table.write.mode("overwrite").parquet(str(Path(args.out) / stream))
            summary[stream] = table.count()
    print(json.dumps({"out": args.out, "records": summary}))
    return 0


def _replay(args: argparse.Namespace) -> int:
    import json

    from mwcore.archive.replay import Progress, Replay, parse_time
    from mwcore.serde.avro import SchemaRegistry
    from mwcore.store.client import redis_client
    from mwcore.tools.progress import Bar

    bootstrap = _bootstrap(args)
    redis_url = _redis_url(args)
    schemas = _schemas_dir(args)
    source = args.source_namespace or _env().namespace
    replay = Replay(
        bootstrap=bootstrap,
        client=redis_client(redis_url),
        registry=SchemaRegistry.from_directory(schemas),
        stream=args.stream,
        namespace=args.namespace,
        source_namespace=source,
        from_ms=parse_time(args.from_time) if args.from_time else None,
        to_ms=parse_time(args.to_time) if args.to_time else None,
        signer=_env().signer(),
    )
    bar = None if args.quiet else Bar(f"replay {args.stream} -> {args.namespace}")
    last: list[Progress] = []

    def show(p: Progress) -> None:
        last[:] = [p]
        if bar is not None:
            bar.update(p.sent, p.total, p.elapsed_s, p.watermark)

    summary = replay.run(show)
    if bar is not None and last:  # the run's last report: everything sent, the final watermark
        p = last[0]
        bar.update(p.sent, p.total, p.elapsed_s, p.watermark, final=True)
    print(json.dumps(summary), flush=True)
    return 0


def _retire(args: argparse.Namespace) -> int:
    from mwcore.process.bootstrap import preflight
    from mwcore.store.client import redis_client
    from mwcore.store.retire_log import RedisRetireLog
    from mwcore.transport.topics import partition_ends
    from mwcore.watermarks.retire import QUIET_S, Retirer

    bootstrap, redis_url = _bootstrap(args), _redis_url(args)
    namespace = _namespace(args)
    preflight(bootstrap, redis_url, durable=False)  # it writes no checkpoint
    client = redis_client(redis_url)
    try:
        retirer = Retirer(
            RedisRetireLog(client, namespace),
            lambda spec: partition_ends(bootstrap, spec.outputs),
            namespace,
            QUIET_S if args.quiet_s is None else args.quiet_s,
        )
        outcome = retirer.retire(args.computation)
    finally:
        client.close()
    print(f"mw retire: {outcome.line()}", flush=True)
    return 0


def _acls(args: argparse.Namespace) -> int:
    from mwcore.tools import acls

    bootstrap = args.bootstrap or _env().bootstrap
    return acls.main(bootstrap, _namespace(args), args.authority, args.service, args.writer, args.apply)


def _up(args: argparse.Namespace) -> int:
    from mwcore.tools.up import runner as up

    return up.main(args.duration, args.rate, args.brokers, args.redis_cluster)


def _down(args: argparse.Namespace) -> int:
    from mwcore.tools.up import runner as up

    return up.down()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mw", description="MillWheel-style stream processing")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one worker process of a computation")
    run.add_argument("computation", help="module:Class of the computation")
    run.add_argument(
        "--processes",
        type=int,
        help="worker processes on this machine (default: $MW_PROCESSES or 1); intervals spread over them",
    )
    run.set_defaults(func=_run)
    auth = sub.add_parser("authority", help="run the watermark authority (MW_* environment)")
    auth.set_defaults(func=_authority)
    wms = sub.add_parser("watermarks", help="show each computation's watermarks and lag, live")
    wms.add_argument("--bootstrap", help="Kafka bootstrap (default: $MW_BOOTSTRAP or a running `mw up`)")
    _namespace_option(wms)
    wms.add_argument("--once", action="store_true", help="print the current values as JSON and exit")
    wms.add_argument("--interval", type=float, default=0.5, help="refresh every SECONDS")
    wms.set_defaults(func=_watermarks)
    tl = sub.add_parser("tail", help="print a stream's records, decoded, one JSON object per line")
    tl.add_argument("stream", help="stream name, e.g. anomalies or windower.dead-letters")
    tl.add_argument("--bootstrap", help="Kafka bootstrap (default: $MW_BOOTSTRAP or a running `mw up`)")
    _namespace_option(tl)
    tl.add_argument("--schemas", help="directory of .avsc files (default: $MW_SCHEMAS_DIR or ./schemas)")
    tl.add_argument("-n", "--lines", type=int, default=10, help="start this many records back per partition")
    tl.add_argument("--from-beginning", action="store_true", help="start at the first record")
    tl.add_argument("--no-follow", action="store_true", help="stop at the end of the data as of now")
    tl.add_argument("--max", type=int, default=None, help="stop after printing this many records")
    tl.set_defaults(func=_tail)
    new = sub.add_parser(
        "new-service", help="create a service from the template in the project's services package"
    )
    new.add_argument("name", help="the service's (and its computation's) name, e.g. trend_counter")
    new.add_argument("--input", help="stream to read (default: one the pipeline produces and nothing reads)")
    new.add_argument("--input-schema", help="its Avro schema (default: as the project's services declare it)")
    root = (
        "the project directory (default: the nearest with [tool.mw] in pyproject.toml, else with services/)"
    )
    new.add_argument("--root", help=root)
    new.set_defaults(func=_new_service)
    bt = sub.add_parser("batch", help="run computations over archived streams in Spark; write Parquet")
    bt.add_argument(
        "--input", help="archived stream(s) to read, comma-separated (default: [tool.mw.batch] inputs)"
    )
    bt.add_argument(
        "--computations",
        help="module:Class, comma-separated, run in order (each reads what the earlier produced); "
        "default: [tool.mw.batch] computations",
    )
    bt.add_argument("--out", required=True, help="directory: one Parquet dataset per output stream")
    bt.add_argument("--from-ms", type=int, default=None, help="records at or after this event time")
    bt.add_argument("--to-ms", type=int, default=None, help="records before this event time")
    bt.add_argument("--bootstrap", help="Kafka bootstrap (default: $MW_BOOTSTRAP or a running `mw up`)")
    _namespace_option(bt)
    bt.add_argument("--schemas", help="directory of .avsc files (default: $MW_SCHEMAS_DIR or ./schemas)")
    bt.add_argument("--master", default="local[2]", help="Spark master")
    bt.set_defaults(func=_batch)
    rp = sub.add_parser(
        "replay", help="re-inject archived records of a stream into another namespace (backfill)"
    )
    rp.add_argument("--stream", required=True, help="the stream to replay, e.g. queries")
    rp.add_argument("--from", dest="from_time", help="event time to start at: ms since the epoch or ISO 8601")
    rp.add_argument("--to", dest="to_time", help="event time to stop before (exclusive); the final watermark")
    rp.add_argument(
        "--namespace",
        type=_namespace_arg,
        required=True,
        help="where to replay to (topics, groups, Redis keys)",
    )
    rp.add_argument(
        "--source-namespace",
        type=_namespace_arg,
        help="where the archive is (default: $MW_NAMESPACE or 'default')",
    )
    rp.add_argument("--bootstrap", help="Kafka bootstrap (default: $MW_BOOTSTRAP or a running `mw up`)")
    rp.add_argument("--redis-url", help="Redis (default: $MW_REDIS_URL or a running `mw up`)")
    rp.add_argument("--schemas", help="directory of .avsc files (default: $MW_SCHEMAS_DIR or ./schemas)")
    rp.add_argument("--quiet", action="store_true", help="no progress bar")
    rp.set_defaults(func=_replay)
    rt = sub.add_parser("retire", help="take a computation whose workers are gone out of the watermarks")
    rt.add_argument("computation", help="the computation's name, as `mw watermarks` shows it")
    rt.add_argument("--bootstrap", help="Kafka bootstrap (default: $MW_BOOTSTRAP or a running `mw up`)")
    rt.add_argument("--redis-url", help="Redis (default: $MW_REDIS_URL or a running `mw up`)")
    _namespace_option(rt)
    quiet = "refuse if its workers were heard from within SECONDS (default 15, at least 12)"
    rt.add_argument("--quiet-s", type=float, default=None, help=quiet)
    rt.set_defaults(func=_retire)
    ac = sub.add_parser(
        "acls", help="Kafka ACLs: only the authority writes mw.watermarks (print; --apply creates them)"
    )
    ac.add_argument("--authority", required=True, help="the watermark authority's principal, User:<name>")
    ac.add_argument(
        "--service", action="append", default=[], help="a service's principal, User:<name> (repeat)"
    )
    ac.add_argument(
        "--writer",
        action="append",
        default=[],
        help="STREAM=User:<name>: the stream's only writer, e.g. model_updates=User:trainer (repeat)",
    )
    _namespace_option(ac)
    ac.add_argument("--bootstrap", help="Kafka bootstrap for --apply (default: $MW_BOOTSTRAP)")
    ac.add_argument(
        "--apply", action="store_true", help="create them (MW_KAFKA_* give an administrator's credentials)"
    )
    ac.set_defaults(func=_acls)
    stack = sub.add_parser("stack", help="start a local broker and Redis and print their addresses")
    stack.add_argument("--duration", type=float, default=0, help="stop after this many seconds")
    _cluster_options(stack)
    stack.set_defaults(func=_stack)
    up = sub.add_parser("up", help="run the pipeline on a local broker and Redis, with a live view")
    up.add_argument("--duration", type=float, default=None, help="stop after SECONDS; print a JSON summary")
    up.add_argument("--rate", type=int, default=2000, help="queries per second the generator writes")
    _cluster_options(up)
    up.set_defaults(func=_up)
    down = sub.add_parser("down", help="stop a running `mw up`")
    down.set_defaults(func=_down)
    return parser


def _cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="Kafka brokers (3: every topic with 3 replicas, 2 in sync; docs/scaling.md)",
    )
    p.add_argument(
        "--redis-cluster", action="store_true", help="a Redis Cluster (3 primaries, 3 replicas) as the store"
    )


def main(argv: Sequence[str] | None = None) -> int:
    from mwcore.process.bootstrap import main as run_main

    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = run_main(lambda: args.func(args), command=args.command)
    return code
