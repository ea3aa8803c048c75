"""Wiring: build a worker for a computation class from settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mwcore.api.clock import MAX_WATERMARK
from mwcore.api.computation import Computation
from mwcore.cores import core, panic_on_key
from mwcore.injector.injector import Injector
from mwcore.process.plumbing import Plumbing
from mwcore.process.settings import AuthoritySettings, InjectorSettings, WorkerSettings
from mwcore.runtime.config import ClientConfig
from mwcore.runtime.worker import Worker
from mwcore.serde.avro import SchemaRegistry
from mwcore.store.authority_log import RedisAuthorityLog
from mwcore.store.client import REDIS_RETRIES, default_wait_replicas, redis_client
from mwcore.store.manual_watermark import RedisWatermark
from mwcore.store.redis_store import RedisCheckpointStore
from mwcore.store.report_sink import RedisReportSink
from mwcore.transport.schema_registry import RegistryClient
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.transport.watermark_topic import TopicWatermark, WatermarkFeed, WatermarkPublisher
from mwcore.watermarks.authority import Authority, AuthorityConfig
from mwcore.watermarks.source import FixedWatermark, WatermarkSource


def build_workers(
    cls: type[Computation[Any]], settings: WorkerSettings, plumbing: Plumbing | None = None
) -> list[Worker]:
    """The computation's worker, then one for each of its rekey stages; they share the
    schema registry and the schemas topic (its lookups and what it has read), and the
    core that ``MW_CORE`` names (chosen here, once)."""
    from mwcore.runtime.rekey import rekey_stages

    stages = rekey_stages(cls, settings.unsafe)
    registry, schemas = build_schemas(settings)
    ids = build_registry_client(settings, registry)
    plumbing = plumbing or Plumbing.load()
    if plumbing.panic_key:
        panic_on_key(plumbing.panic_key)
    return [build_worker(c, settings, registry, schemas, plumbing, ids) for c in (cls, *stages)]


def build_schemas(settings: WorkerSettings) -> tuple[SchemaRegistry, SchemaTopic]:
    """The schemas directory, with the namespace's schemas topic plugged in for writer
    schemas it lacks (unless ``MW_UNSAFE_NO_SCHEMA_LOOKUP``, a negative control)."""
    registry = SchemaRegistry.from_directory(settings.schemas_dir)
    schemas = SchemaTopic(settings.bootstrap, settings.namespace)
    if not settings.unsafe.no_schema_lookup:
        registry.use_source(schemas)
    return registry, schemas


def build_registry_client(settings: ClientConfig, registry: SchemaRegistry) -> RegistryClient | None:
    """The schema registry (``MW_SCHEMA_REGISTRY_URL``; None: none is set), plugged into
    ``registry`` for schemas named by id."""
    access = settings.registry_access()
    if access is None:
        return None
    client = RegistryClient(access, compatibility=settings.schema_compatibility)
    if not settings.unsafe.no_schema_lookup:
        registry.use_ids(client)
    return client


def build_worker(
    cls: type[Computation[Any]],
    settings: WorkerSettings,
    registry: SchemaRegistry,
    schemas: SchemaTopic,
    plumbing: Plumbing,
    schema_registry: RegistryClient | None = None,
) -> Worker:
    parts = core(settings.core)
    client = redis_client(settings.redis_url)
    wait = settings.redis_wait_replicas
    store = RedisCheckpointStore(
        client,
        controls=settings.unsafe,
        retries=REDIS_RETRIES,
        replicas=default_wait_replicas(client) if wait == "auto" else wait,
        wait_ms=settings.redis_wait_ms,
        packer=parts.packer(),
        seen_buckets=settings.seen_buckets,
    )
    signer = settings.signer
    watermarks: WatermarkSource
    if settings.watermark == "authority":
        watermarks = TopicWatermark(WatermarkFeed(settings.bootstrap, settings.namespace, signer))
    elif settings.watermark == "redis":
        watermarks = RedisWatermark(client, prefix=f"mw:wm:{settings.namespace}")
    elif settings.watermark == "max":
        watermarks = FixedWatermark(MAX_WATERMARK)
    else:
        watermarks = FixedWatermark()
    return Worker(
        cls(),
        settings,
        store,
        registry,
        watermarks,
        core=parts,
        tuning=plumbing.tuning(),
        faults=plumbing.fault_points(),
        reports=RedisReportSink(client, settings.namespace),
        schemas=schemas,
        schema_registry=schema_registry,
    )


def build_authority(settings: AuthoritySettings) -> Authority:
    config = AuthorityConfig(
        namespace=settings.namespace,
        shard=settings.authority_shard,
        shards=settings.authority_shards,
        block_ms=settings.authority_block_ms,
        percentile=settings.authority_percentile,
        controls=settings.unsafe,
    )
    log = RedisAuthorityLog(redis_client(settings.redis_url), settings.namespace)
    publisher = WatermarkPublisher(settings.bootstrap, settings.namespace, settings.signer)
    return Authority(log, publisher, config)


def build_injector(name: str, outputs: Mapping[str, str | None], settings: InjectorSettings) -> Injector:
    registry = SchemaRegistry.from_directory(settings.schemas_dir)
    return Injector(
        bootstrap=settings.bootstrap,
        client=redis_client(settings.redis_url),
        registry=registry,
        name=name,
        outputs=outputs,
        namespace=settings.namespace,
        index=settings.injector_index,
        processes=settings.injector_processes,
        linger_ms=settings.injector_linger_ms,
        signer=settings.signer,
        wire=settings.wire,
        schema_registry=build_registry_client(settings, registry),
    )
