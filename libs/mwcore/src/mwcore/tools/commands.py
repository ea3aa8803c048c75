"""What each ``mw`` subcommand does, given the arguments ``mwcore.tools.cli`` parsed:
``mw_<command>(args)`` returns the exit code. Where an address is not given, it falls
back on the environment (``MW_BOOTSTRAP``, ...), then on a running ``mw up``."""

from __future__ import annotations

import argparse
import functools
import signal
import time
from types import FrameType
from typing import TYPE_CHECKING

from mwcore.errors import ConfigError
from mwcore.process.settings import CommandSettings

if TYPE_CHECKING:
    from mwcore.serde.avro import SchemaRegistry
    from mwcore.transport.schema_registry import RegistryClient


@functools.cache
def _env() -> CommandSettings:
    """What a command falls back on (``MW_BOOTSTRAP``, ...), read once."""
    return CommandSettings.load()


def _namespace(args: argparse.Namespace) -> str:
    """--namespace, else $MW_NAMESPACE, else 'default'."""
    return str(args.namespace or _env().namespace)


def mw_run(args: argparse.Namespace) -> int:
    from mwcore.process.run import run_computation

    return run_computation(args.computation, processes=args.processes)


def mw_authority(args: argparse.Namespace) -> int:
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


def _registry_url() -> str | None:
    """$MW_SCHEMA_REGISTRY_URL, else a running `mw up`'s registry (None: neither)."""
    from mwcore.tools.up.runner import running

    return _env().schema_registry_url or running().get("schema_registry_url") or None


def use_registry(registry: SchemaRegistry) -> RegistryClient | None:
    """Plug the schema registry (``_registry_url``) into ``registry`` for schemas named by
    id; the client, or None where there is no registry."""
    from mwcore.transport.schema_registry import RegistryAccess, RegistryClient

    url = _registry_url()
    if url is None:
        return None
    env = _env()
    auth = env.schema_registry_auth
    client = RegistryClient(
        RegistryAccess(url, None if auth is None else auth.get_secret_value(), env.schema_registry_ca)
    )
    registry.use_ids(client)
    return client


def mw_schemas(args: argparse.Namespace) -> int:
    from mwcore.serde.avro import SchemaRegistry
    from mwcore.tools import schemas

    client = use_registry(SchemaRegistry())
    if client is None:
        raise ConfigError("no schema registry: set MW_SCHEMA_REGISTRY_URL, or start `mw up`")
    client.check_reachable()
    namespace = _namespace(args)
    if args.action == "list":
        return schemas.list_subjects(client, namespace)
    if args.action == "check":
        return schemas.check_subjects(client, SchemaRegistry.from_directory(_schemas_dir(args)), namespace)
    schemas.import_schemas(client, _bootstrap(args), namespace)
    return 0


def mw_watermarks(args: argparse.Namespace) -> int:
    from mwcore.tools import watermarks_view as view

    namespace = _namespace(args)
    return view.main(_bootstrap(args), namespace, args.once, args.interval, signer=_env().signer)


def mw_tail(args: argparse.Namespace) -> int:

    from mwcore.serde.avro import SchemaRegistry
    from mwcore.tools.tail import tail
    from mwcore.transport.schema_topic import SchemaTopic

    bootstrap = _bootstrap(args)
    namespace = _namespace(args)
    registry = SchemaRegistry.from_directory(_schemas_dir(args))
    registry.use_source(SchemaTopic(bootstrap, namespace))  # writers newer than the directory
    use_registry(registry)
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


def mw_stack(args: argparse.Namespace) -> int:
    from mwcore.tools.stack.builder import local_stack

    with local_stack(brokers=args.brokers, redis_cluster=args.redis_cluster) as stack:
        print(f"export MW_BOOTSTRAP={stack.bootstrap}")
        print(f"export MW_REDIS_URL={stack.redis_url}")
        if stack.schema_registry_url:
            print(f"export MW_SCHEMA_REGISTRY_URL={stack.schema_registry_url}")
        print(end="", flush=True)
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


def mw_new_service(args: argparse.Namespace) -> int:
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


def batch_defaults(args: argparse.Namespace) -> tuple[list[str], str]:
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


def mw_batch(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from mwcore.archive.spark.batch import decode_frame, run_pipeline
    from mwcore.archive.spark.session import spark_session
    from mwcore.archive.spark.source import read_archive, take_writers
    from mwcore.serde.avro import SchemaRegistry

    computations, inputs = batch_defaults(args)
    bootstrap = _bootstrap(args)
    schemas = _schemas_dir(args)
    registry = SchemaRegistry.from_directory(schemas)
    options = {}
    if args.from_ms is not None:
        options["startingTimestamp"] = str(args.from_ms)
    if args.to_ms is not None:
        options["endingTimestamp"] = str(args.to_ms)
    namespace = _namespace(args)
    take_writers(registry, bootstrap, namespace, [s.strip() for s in inputs.split(",") if s.strip()])
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


def mw_replay(args: argparse.Namespace) -> int:
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
        signer=_env().signer,
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


def mw_retire(args: argparse.Namespace) -> int:
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


def mw_acls(args: argparse.Namespace) -> int:
    from mwcore.tools import acls

    bootstrap = args.bootstrap or _env().bootstrap
    return acls.main(bootstrap, _namespace(args), args.authority, args.service, args.writer, args.apply)


def mw_up(args: argparse.Namespace) -> int:
    from mwcore.tools.up import runner as up

    return up.main(args.duration, args.rate, args.brokers, args.redis_cluster)


def mw_down(args: argparse.Namespace) -> int:
    from mwcore.tools.up import runner as up

    return up.down()
