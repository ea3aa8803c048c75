"""The ``mw`` command: its arguments (what each subcommand does is
``mwcore.tools.commands``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import mwcore
from mwcore.runtime.config import check_namespace
from mwcore.tools import commands


def _namespace_arg(value: str) -> str:
    try:
        return check_namespace(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _namespace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace", type=_namespace_arg, help="namespace (default: $MW_NAMESPACE or 'default')"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mw", description="MillWheel-style stream processing")
    parser.add_argument("--version", action="version", version=f"mw (mwcore) {mwcore.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one worker process of a computation")
    run.add_argument("computation", help="module:Class of the computation")
    run.add_argument(
        "--processes",
        type=int,
        help="worker processes on this machine (default: $MW_PROCESSES or 1); intervals spread over them",
    )
    run.set_defaults(func=commands.mw_run)
    auth = sub.add_parser("authority", help="run the watermark authority (MW_* environment)")
    auth.set_defaults(func=commands.mw_authority)
    wms = sub.add_parser("watermarks", help="show each computation's watermarks and lag, live")
    wms.add_argument("--bootstrap", help="Kafka bootstrap (default: $MW_BOOTSTRAP or a running `mw up`)")
    _namespace_option(wms)
    wms.add_argument("--once", action="store_true", help="print the current values as JSON and exit")
    wms.add_argument("--interval", type=float, default=0.5, help="refresh every SECONDS")
    wms.set_defaults(func=commands.mw_watermarks)
    tl = sub.add_parser("tail", help="print a stream's records, decoded, one JSON object per line")
    tl.add_argument("stream", help="stream name, e.g. anomalies or windower.dead-letters")
    tl.add_argument("--bootstrap", help="Kafka bootstrap (default: $MW_BOOTSTRAP or a running `mw up`)")
    _namespace_option(tl)
    tl.add_argument("--schemas", help="directory of .avsc files (default: $MW_SCHEMAS_DIR or ./schemas)")
    tl.add_argument("-n", "--lines", type=int, default=10, help="start this many records back per partition")
    tl.add_argument("--from-beginning", action="store_true", help="start at the first record")
    tl.add_argument("--no-follow", action="store_true", help="stop at the end of the data as of now")
    tl.add_argument("--max", type=int, default=None, help="stop after printing this many records")
    tl.set_defaults(func=commands.mw_tail)
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
    new.set_defaults(func=commands.mw_new_service)
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
    bt.set_defaults(func=commands.mw_batch)
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
    rp.set_defaults(func=commands.mw_replay)
    rt = sub.add_parser("retire", help="take a computation whose workers are gone out of the watermarks")
    rt.add_argument("computation", help="the computation's name, as `mw watermarks` shows it")
    rt.add_argument("--bootstrap", help="Kafka bootstrap (default: $MW_BOOTSTRAP or a running `mw up`)")
    rt.add_argument("--redis-url", help="Redis (default: $MW_REDIS_URL or a running `mw up`)")
    _namespace_option(rt)
    quiet = "refuse if its workers were heard from within SECONDS (default 15, at least 12)"
    rt.add_argument("--quiet-s", type=float, default=None, help=quiet)
    rt.set_defaults(func=commands.mw_retire)
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
    ac.set_defaults(func=commands.mw_acls)
    sc = sub.add_parser(
        "schemas", help="the namespace's subjects in the schema registry: list, check, import"
    )
    sc.add_argument(
        "action",
        choices=["list", "check", "import"],
        help="list them; check the directory's "
        "schemas against them; import the writer schemas of mw.schemas into the registry",
    )
    sc.add_argument(
        "--bootstrap", help="Kafka bootstrap, for import (default: $MW_BOOTSTRAP or a running `mw up`)"
    )
    sc.add_argument(
        "--schemas", help="directory of .avsc files, for check (default: $MW_SCHEMAS_DIR or ./schemas)"
    )
    _namespace_option(sc)
    sc.set_defaults(func=commands.mw_schemas)
    stack = sub.add_parser("stack", help="start a local broker and Redis and print their addresses")
    stack.add_argument("--duration", type=float, default=0, help="stop after this many seconds")
    _cluster_options(stack)
    stack.set_defaults(func=commands.mw_stack)
    up = sub.add_parser("up", help="run the pipeline on a local broker and Redis, with a live view")
    up.add_argument("--duration", type=float, default=None, help="stop after SECONDS; print a JSON summary")
    up.add_argument("--rate", type=int, default=2000, help="queries per second the generator writes")
    _cluster_options(up)
    up.set_defaults(func=commands.mw_up)
    down = sub.add_parser("down", help="stop a running `mw up`")
    down.set_defaults(func=commands.mw_down)
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
    from mwcore.process import logs
    from mwcore.process.bootstrap import main as run_main

    parser = build_parser()
    args = parser.parse_args(argv)
    # a command's log lines go to stderr, never among what it prints (`mw tail`'s records);
    # the commands that start a process configure them again from its settings
    logs.configure()
    code: int = run_main(lambda: args.func(args), command=args.command)
    return code
