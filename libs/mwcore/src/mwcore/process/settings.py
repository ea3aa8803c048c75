"""Typed settings, read once from the environment (``MW_*``) at a process's edge."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, SecretStr, TypeAdapter, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mwcore.api.signing import MacV1, Signer
from mwcore.controls import NegativeControls, variable
from mwcore.cores import CoreName, default_name, require
from mwcore.errors import ConfigError
from mwcore.injector.injector import LINGER_MS
from mwcore.process import environment, plumbing  # noqa: F401 (plumbing: its variables known, environment.py)
from mwcore.process.environment import (
    load_settings as load_settings,  # (the public one: mwcore.load_settings)
)
from mwcore.runtime.config import (
    ClientConfig,
    MetricsConfig,
    WorkerConfig,
    check_bootstrap,
    check_namespace,
    check_redis_url,
    check_secret,
)
from mwcore.serde.framing import DEFAULT_WIRE, Wire


class MetricsSettings(MetricsConfig, BaseSettings):
    """Where a process serves its Prometheus metrics and health check."""

    model_config = SettingsConfigDict(env_prefix="MW_", extra="ignore")


class ClientSettings(ClientConfig, BaseSettings):
    """What every client of a pipeline reads: its broker and namespace (the model job
    reads these through the public API, ``mwcore.ClientSettings``). ``load()`` reads the
    environment once and raises ``ConfigError`` naming each bad variable; subclasses add
    their own checks in ``check()``."""

    model_config = SettingsConfigDict(env_prefix="MW_", extra="ignore")

    @classmethod
    def load(cls, **overrides: Any) -> Self:
        """Read once from the environment: ``ConfigError`` naming each bad variable, or
        the first ``MW_*`` variable no setting of this process reads (``environment.py``)."""
        environment.check()
        overrides.setdefault("unsafe", negative_controls())
        settings = load_settings(cls, **overrides)
        settings.check()
        return settings

    def check(self) -> None:
        """Checks across fields, after each field is valid (``ConfigError``)."""


class ProcessSettings(MetricsSettings, ClientSettings):
    """What every process of the kit reads: the broker, Redis, the namespace, logging,
    and the negative controls (``MW_UNSAFE_*``, read apart: ``negative_controls``)."""

    model_config = SettingsConfigDict(env_prefix="MW_", extra="ignore")

    redis_url: str = Field(description="Redis URL of the checkpoint store, redis://host:port/db")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, v: str) -> str:
        return check_redis_url(v)

    def durable_store(self) -> bool:
        """Whether preflight refuses a Redis that can lose acknowledged writes."""
        return False


class WorkerSettings(ProcessSettings, WorkerConfig):
    """Everything a worker process reads from its environment: the runtime's settings
    (``WorkerConfig``, passed down as they are) and what the process itself reads."""

    schemas_dir: Path = Field(description="directory of the Avro .avsc files")
    # worker processes of the computation on this machine (process/pool.py)
    processes: int = Field(default=1, ge=1, le=256)
    # authority: follow the watermark authority's topic; redis: read mw:wm:<ns>:<name>
    # (set by hand, for tests); none: event timers never fire; max: they all fire
    watermark: Literal["authority", "redis", "none", "max"] = "authority"
    # a store that can lose acknowledged writes (no appendfsync always) is refused at
    # start unless this is set (preflight.check_durable, docs/reliability.md)
    allow_volatile_store: bool = False
    # a checkpoint counts as committed once this many replicas of its Redis primary
    # acknowledged it (WAIT; a failover then cannot lose it); auto: 1 if the store has
    # replicas (a cluster's, or a single Redis's connected ones), else 0
    redis_wait_replicas: int | Literal["auto"] = Field(default="auto")
    redis_wait_ms: int = Field(default=5000, ge=1, le=60_000)
    # native: the Rust core (mwcore/cores), the default where installed; python: the
    # pure-Python runtime (the reference), the default where the native core is not
    core: CoreName = Field(default_factory=default_name)
    # new seen ids into sets of 5 s of event time (store/scripts.py: a fraction of the
    # store's work per record); reads find both, so it can be turned on, and off, in a
    # rolling deploy of a version that reads both (not beside workers of an older one,
    # which read only the sorted set); 0 keeps the one sorted set
    seen_buckets: bool = True
    # young-generation threshold of Python's cycle collector in a worker process (0:
    # Python's default, 700); see runtime.runner.tune_gc
    gc_threshold: int = Field(default=50_000, ge=0)

    def check(self) -> None:
        _check_dir(self.schemas_dir)
        require(self.core)  # built? else one line saying how, before anything connects

    def durable_store(self) -> bool:
        return not self.allow_volatile_store


class AuthoritySettings(ProcessSettings):
    """What a watermark authority process reads from its environment."""

    authority_shard: int = Field(default=0, ge=0)
    authority_shards: int = Field(default=1, ge=1)
    authority_block_ms: int = Field(default=20, ge=1, le=1000)
    authority_percentile: float = Field(default=0.99, gt=0.5, lt=1.0)
    allow_volatile_store: bool = False  # as for workers: the journal must survive a crash

    def check(self) -> None:
        if self.authority_shard >= self.authority_shards:
            raise ConfigError(
                f"MW_AUTHORITY_SHARD={self.authority_shard} must be below "
                f"MW_AUTHORITY_SHARDS={self.authority_shards}"
            )

    def durable_store(self) -> bool:
        return not self.allow_volatile_store


class InjectorSettings(ProcessSettings):
    """What an injector process reads (a service adds its source's own settings). Its
    Redis holds only its promises, which a loss makes conservative: no durability check."""

    schemas_dir: Path = Field(description="directory of the Avro .avsc files")
    injector_index: int = Field(default=0, ge=0)
    injector_processes: int = Field(default=1, ge=1)
    injector_linger_ms: int = Field(default=LINGER_MS, ge=0, le=1000)  # the producer's linger.ms

    def check(self) -> None:
        if self.injector_index >= self.injector_processes:
            raise ConfigError(
                f"MW_INJECTOR_INDEX={self.injector_index} must be below "
                f"MW_INJECTOR_PROCESSES={self.injector_processes}"
            )
        _check_dir(self.schemas_dir)


class CommandSettings(BaseSettings):
    """What the ``mw`` commands and the Spark source fall back on when an option is not
    given: each optional here (a command says what is missing, and where else it looks)."""

    model_config = SettingsConfigDict(env_prefix="MW_", extra="ignore")

    bootstrap: str | None = None
    redis_url: str | None = None
    schemas_dir: Path | None = None
    namespace: str = "default"
    id_secret: SecretStr | None = None
    mac_v1: MacV1 = "off"
    wire: Wire = DEFAULT_WIRE
    schema_registry_url: str | None = None
    schema_registry_auth: SecretStr | None = None
    schema_registry_ca: str | None = None

    @field_validator("id_secret")
    @classmethod
    def _secret(cls, v: SecretStr | None) -> SecretStr | None:
        return check_secret(v)

    @cached_property
    def signer(self) -> Signer:
        """What signs and checks with the pipeline secret (nothing, without one)."""
        return Signer(None if self.id_secret is None else self.id_secret.get_secret_value(), self.mac_v1)

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, v: str | None) -> str | None:
        return v if v is None else check_bootstrap(v)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        return check_namespace(v)

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, v: str | None) -> str | None:
        return v if v is None else check_redis_url(v)

    @classmethod
    def load(cls) -> Self:
        return load_settings(cls)


class StackSettings(BaseSettings):
    """What the local stack reads: where the Apache Kafka jars and the schema registry are kept, and Java."""

    model_config = SettingsConfigDict(extra="ignore")

    kafka_home: Path | None = Field(default=None, validation_alias="MW_KAFKA_HOME")
    registry_home: Path | None = Field(default=None, validation_alias="MW_REGISTRY_HOME")
    xdg_cache_home: Path | None = Field(default=None, validation_alias="XDG_CACHE_HOME")
    xdg_runtime_dir: Path | None = Field(default=None, validation_alias="XDG_RUNTIME_DIR")
    java_home: Path | None = Field(default=None, validation_alias="JAVA_HOME")

    @classmethod
    def load(cls) -> Self:
        return load_settings(cls)


_BOOL = TypeAdapter(bool)
_CONTROLS = {variable(f.name): f.name for f in dataclasses.fields(NegativeControls)}


def negative_controls(environ: Mapping[str, str] | None = None) -> NegativeControls:
    """The negative controls from ``MW_UNSAFE_*`` (``mwcore/controls.py``); a name that is
    not a control, or a value that is not a boolean, is a ``ConfigError``."""
    env = os.environ if environ is None else environ
    values: dict[str, bool] = {}
    for var, raw in env.items():
        name = var.upper()
        if not name.startswith("MW_UNSAFE_"):
            continue
        if name not in _CONTROLS:
            raise ConfigError(f"{var}: no such negative control (known: {', '.join(sorted(_CONTROLS))})")
        try:
            values[_CONTROLS[name]] = _BOOL.validate_python(raw)
        except ValidationError:
            raise ConfigError(f"{var}={raw!r}: not a boolean (1 or 0, true or false)") from None
    return NegativeControls(**values)


def _check_dir(schemas_dir: Path) -> None:
    if not schemas_dir.is_dir():
        raise ConfigError(f"MW_SCHEMAS_DIR={schemas_dir} is not a directory")
