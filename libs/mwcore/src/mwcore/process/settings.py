"""Typed settings, read once from the environment (``MW_*``) at a process's edge."""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

from pydantic import Field, SecretStr, TypeAdapter, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mwcore.api.signing import MIN_SECRET_CHARS, Signer
from mwcore.controls import SAFE, NegativeControls, variable
from mwcore.core import Core, default_core, native
from mwcore.errors import ConfigError
from mwcore.injector.injector import LINGER_MS
from mwcore.limits import NAMESPACE_PATTERN


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class MetricsSettings(BaseSettings):
    """Where a process serves its Prometheus metrics and health check."""

    model_config = SettingsConfigDict(env_prefix="MW_", extra="ignore")

    # Prometheus metrics and /healthz on this port (unset: not served); 0 picks a free one
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    # the interface it listens on: this machine only, unless told (a container's
    # health check asks from inside; a Prometheus elsewhere needs 0.0.0.0)
    metrics_host: str = "127.0.0.1"
    # /healthz answers 503 once the process's loop has not turned for this many seconds
    metrics_stall_s: float = Field(default=60.0, gt=0)


class ClientSettings(BaseSettings):
    """What every client of a pipeline reads: its broker and namespace (the model job
    reads these through the public API, ``mwcore.ClientSettings``). ``load()`` reads the
    environment once and raises ``ConfigError`` naming each bad variable; subclasses add
    their own checks in ``check()``."""

    model_config = SettingsConfigDict(env_prefix="MW_", extra="ignore")

    bootstrap: str = Field(description="Kafka bootstrap servers, host:port[,host:port]")
    namespace: str = "default"
    # the pipeline secret: record ids, watermarks and witnesses authenticated (api/signing.py)
    id_secret: SecretStr | None = None

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, v: str) -> str:
        return _check_bootstrap(v)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        return check_namespace(v)

    @field_validator("id_secret")
    @classmethod
    def _secret(cls, v: SecretStr | None) -> SecretStr | None:
        return _check_secret(v)

    def signer(self) -> Signer:
        """What signs and checks with the pipeline secret (nothing, without one)."""
        return _signer(self.id_secret)

    @classmethod
    def load(cls, **overrides: Any) -> Self:
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
    # set by load() from MW_UNSAFE_* (not a variable of its own)
    unsafe: NegativeControls = Field(default=SAFE, exclude=True)

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, v: str) -> str:
        return _check_redis_url(v)

    @classmethod
    def load(cls, **overrides: Any) -> Self:
        overrides.setdefault("unsafe", negative_controls())
        return super().load(**overrides)

    def durable_store(self) -> bool:
        """Whether preflight refuses a Redis that can lose acknowledged writes."""
        return False


class WorkerSettings(ProcessSettings):
    """Everything a worker process reads from its environment."""

    schemas_dir: Path = Field(description="directory of the Avro .avsc files")
    worker_id: str = Field(default_factory=_default_worker_id)
    # worker processes of the computation on this machine (process/pool.py)
    processes: int = Field(default=1, ge=1, le=256)
    instance_id: str | None = None
    max_batch_records: int = Field(default=5000, ge=1)
    # per interval: the most keys whose decoded state is kept in memory (the least recently
    # used beyond it are forgotten between batches, and read again when next used)
    max_cache_keys: int = Field(default=100_000, ge=1)
    # 5 ms: half the latency of 10 in the worker at 10,000 records/s, and no less
    # throughput under a backlog (docs/benchmarks.md, "The batch deadline")
    max_batch_delay_ms: int = Field(default=5, ge=0)
    # how soon a dead worker's intervals move on; the broker's group.min.session.timeout.ms
    # must allow it (1 s in the local stack and compose, 6 s by Kafka's default)
    session_timeout_ms: int = Field(default=1500, ge=500, le=300_000)
    # authority: follow the watermark authority's topic; redis: read mw:wm:<ns>:<name>
    # (set by hand, for tests); none: event timers never fire; max: they all fire
    watermark: Literal["authority", "redis", "none", "max"] = "authority"
    report_interval_ms: int = Field(default=50, ge=10, le=5000)
    # seen ids older than the input watermark minus this are forgotten (late injector
    # data re-sent within it is still dropped as a duplicate)
    seen_gc_slack_ms: int = Field(default=60_000, ge=0)
    # a store that can lose acknowledged writes (no appendfsync always) is refused at
    # start unless this is set (preflight.check_durable, docs/reliability.md)
    allow_volatile_store: bool = False
    # a checkpoint counts as committed once this many replicas of its Redis primary
    # acknowledged it (WAIT; a failover then cannot lose it); auto: 1 if the store has
    # replicas (a cluster's, or a single Redis's connected ones), else 0
    redis_wait_replicas: int | Literal["auto"] = Field(default="auto")
    redis_wait_ms: int = Field(default=5000, ge=1, le=60_000)
    # productions and watermark reports wait until Kafka holds the commit witness
    # (runtime/witness.py); off: the witness only detects a loss older than its last write
    witness_gate: bool = True
    # after a stop on a store behind the commit witness, an operator who chose to go on
    # from the older state sets this once (docs/reliability.md): the loss is logged, not fatal
    accept_store_rollback: bool = False
    latency_out: str = ""
    faults: str = ""
    fault_log: str = ""
    # set in the children of a worker pool (process/pool.py): they run as plain workers
    pool_child: bool = False
    # native: the Rust core (mwcore/core.py), the default where installed; python: the
    # pure-Python runtime (the reference), the default where the native core is not
    core: Core = Field(default_factory=default_core)
    # MW_NATIVE_CONSUMER (on by default; 0 turns it off): with the native core, the group
    # consumer on its librdkafka instead of confluent-kafka's (transport/native_consumer.py),
    # the record envelope read in Rust; the Python core ignores it
    native_consumer: bool = True
    # MW_NATIVE_BATCH_POLL (on by default; 0 turns it off): with the native consumer, a
    # poll's messages taken from librdkafka in one call, from a queue of their own
    # (native/src/fetched.rs), rather than one call a message
    native_batch_poll: bool = True
    # MW_NATIVE_EFFECTS (on by default; 0 turns it off): with the native core, user code
    # run on its Context and the effects applied, the timers queued, in Rust
    # (runtime/effects.py); the Python core ignores it
    native_effects: bool = True
    # MW_SEEN_BUCKETS (on by default; 0 keeps the one sorted set): new seen ids into sets
    # of 5 s of event time (store/scripts.py: a fraction of the store's work per record);
    # reads find both, so it can be turned on, and off, in a rolling deploy of a version
    # that reads both (not beside workers of an older one, which read only the sorted set)
    seen_buckets: bool = True
    # MW_OVERLAP_COMMITS (on by default; 0 turns it off): a batch's checkpoint is written to
    # the store while the worker goes on with the next batch (runtime/worker.py: at most one
    # commit turn in flight; its productions are sent, and the next one made, once it is durable)
    overlap_commits: bool = True
    # MW_WHOLE_STATE_MB (64 MiB by default; 0 turns it off): at acquisition, an interval's whole state is read
    # when it is at most this many MiB (and at most the cache's keys), so a key not cached
    # then is served without a read from the store (runtime/state_cache.py)
    whole_state_mb: int = Field(default=64, ge=0)
    # young-generation threshold of Python's cycle collector in a worker process (0:
    # Python's default, 700); see runtime.runner.tune_gc
    gc_threshold: int = Field(default=50_000, ge=0)

    def check(self) -> None:
        _check_dir(self.schemas_dir)
        if self.core == "native":
            native()  # built? else one line saying how, before anything connects

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

    @field_validator("id_secret")
    @classmethod
    def _secret(cls, v: SecretStr | None) -> SecretStr | None:
        return _check_secret(v)

    def signer(self) -> Signer:
        return _signer(self.id_secret)

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, v: str | None) -> str | None:
        return v if v is None else _check_bootstrap(v)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        return check_namespace(v)

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, v: str | None) -> str | None:
        return v if v is None else _check_redis_url(v)

    @classmethod
    def load(cls) -> Self:
        return load_settings(cls)


class StackSettings(BaseSettings):
    """What the local stack reads: where the Apache Kafka jars are kept, and Java."""

    model_config = SettingsConfigDict(extra="ignore")

    kafka_home: Path | None = Field(default=None, validation_alias="MW_KAFKA_HOME")
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


S = TypeVar("S", bound=BaseSettings)


def load_settings(cls: type[S], **overrides: Any) -> S:
    """``cls`` read from the environment (and ``overrides``); a ``ConfigError`` naming
    every variable that is missing or invalid."""
    try:
        return cls(**overrides)
    except ValidationError as exc:
        raise ConfigError(_explain(exc)) from None


def _check_dir(schemas_dir: Path) -> None:
    if not schemas_dir.is_dir():
        raise ConfigError(f"MW_SCHEMAS_DIR={schemas_dir} is not a directory")


def _check_bootstrap(v: str) -> str:
    for part in v.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{part!r} is not host:port")
    return v


def _check_redis_url(v: str) -> str:
    if not v.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("must start with redis://, rediss:// or unix://")
    return v


def check_namespace(v: str) -> str:
    """A namespace (``ValueError`` unless it is letters, digits, ``_`` and ``-``)."""
    if not re.match(NAMESPACE_PATTERN, v):
        raise ValueError(
            f"{v!r:.80} is not a namespace: 1 to 63 letters, digits, '_' or '-', starting with "
            "a letter or digit (it names topics, groups and Redis keys)"
        )
    return v


def _check_secret(v: SecretStr | None) -> SecretStr | None:
    if v is not None and len(v.get_secret_value()) < MIN_SECRET_CHARS:
        raise ValueError(f"needs at least {MIN_SECRET_CHARS} characters")
    return v


def _signer(secret: SecretStr | None) -> Signer:
    return Signer(None if secret is None else secret.get_secret_value())


def _explain(exc: ValidationError) -> str:
    """Every invalid variable and why, on one line: ``MW_A: why; MW_B: why``."""
    parts = []
    for err in exc.errors():
        name = "_".join(str(p) for p in err["loc"])
        name = name if name.isupper() else "MW_" + name.upper()  # an alias is its own name
        why = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{name}: {why}")
    return "; ".join(parts)
