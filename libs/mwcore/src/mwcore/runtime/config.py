"""A worker's settings as the runtime reads them, each default stated here once.

``WorkerConfig`` is what a worker is configured by. A process reads it from its
environment once, at its edge: ``process.settings.WorkerSettings`` is a
``WorkerConfig`` (it adds what only the process reads: Redis, the schemas, logging) and
is passed down as it is. A worker made in code (tests, benchmarks) is given a
``WorkerConfig`` built directly; nothing below the edge reads the environment.

``Tuning`` is not settings: the runtime's own knobs, which tests and benchmarks set in
code (``process/plumbing.py`` reads the few that reach a worker process), never users.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from mwcore.api.signing import MIN_SECRET_CHARS, MacV1, Signer
from mwcore.controls import SAFE, NegativeControls
from mwcore.limits import NAMESPACE_PATTERN
from mwcore.serde.framing import DEFAULT_WIRE, Wire
from mwcore.transport.schema_registry import Compatibility, RegistryAccess


class ClientConfig(BaseModel):
    """What every client of a pipeline is configured by: its broker, its namespace, the
    pipeline secret, and the negative controls (``MW_UNSAFE_*``, read apart:
    ``process.settings.negative_controls``)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    bootstrap: str = Field(description="Kafka bootstrap servers, host:port[,host:port]")
    namespace: str = "default"
    # the pipeline secret: record ids, watermarks and witnesses authenticated (api/signing.py)
    id_secret: SecretStr | None = None
    # records' MACs of version 1 (the id only): off (refused), read (accepted: a migration
    # window), write (accepted and written: the first step of an upgrade, and the way back)
    mac_v1: MacV1 = "off"
    # set from MW_UNSAFE_* at the edge (not a variable of its own)
    unsafe: NegativeControls = Field(default=SAFE, exclude=True)
    # the framing of the values of streams that declare none (serde/framing.py), and the
    # other one read too on them (a migration: docs/ecosystem.md)
    wire: Wire = DEFAULT_WIRE
    wire_read_also: Wire | None = None
    # the schema registry (Confluent's REST API): where streams framed "confluent" find
    # their schemas by id; basic auth as user:password; TLS: the CA, a client certificate
    schema_registry_url: str | None = None
    schema_registry_auth: SecretStr | None = None
    schema_registry_ca: str | None = None
    schema_registry_certificate: str | None = None
    schema_registry_key: str | None = None
    # the compatibility level of a subject the kit creates (one with its own keeps it)
    schema_compatibility: Compatibility = "FULL_TRANSITIVE"

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, v: str) -> str:
        return check_bootstrap(v)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        return check_namespace(v)

    @field_validator("id_secret")
    @classmethod
    def _secret(cls, v: SecretStr | None) -> SecretStr | None:
        return check_secret(v)

    @cached_property
    def signer(self) -> Signer:
        """What signs and checks with the pipeline secret (nothing, without one)."""
        secret = self.id_secret
        return Signer(None if secret is None else secret.get_secret_value(), self.mac_v1)

    def registry_access(self) -> RegistryAccess | None:
        """How the schema registry is reached (None: no MW_SCHEMA_REGISTRY_URL)."""
        if not self.schema_registry_url:
            return None
        auth = self.schema_registry_auth
        return RegistryAccess(
            self.schema_registry_url,
            basic_auth=None if auth is None else auth.get_secret_value(),
            ca=self.schema_registry_ca,
            certificate=self.schema_registry_certificate,
            key=self.schema_registry_key,
        )


class MetricsConfig(BaseModel):
    """Where a process serves its Prometheus metrics and health check."""

    model_config = ConfigDict(frozen=True)

    # Prometheus metrics and /healthz on this port (unset: not served); 0 picks a free one
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    # the interface it listens on: this machine only, unless told (a container's
    # health check asks from inside; a Prometheus elsewhere needs 0.0.0.0)
    metrics_host: str = "127.0.0.1"
    # /healthz answers 503 once the process's loop has not turned for this many seconds
    # (a worker: also once an interval with input waiting has made no progress for as long)
    metrics_stall_s: float = Field(default=60.0, gt=0)
    # Redis and the broker asked this often whether they answer (process/reachability.py:
    # a log line, /healthz and mw_dependency_up when one does not); 0: never
    reach_every_ms: int = Field(default=1000, ge=0, le=60_000)


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class WorkerConfig(MetricsConfig, ClientConfig):
    """What a worker is configured by."""

    worker_id: str = Field(default_factory=default_worker_id)
    instance_id: str | None = None  # static group membership: fast restarts
    max_batch_records: int = Field(default=5000, ge=1)
    # 5 ms: half the latency of 10 in the worker at 10,000 records/s, and no less
    # throughput under a backlog (CHANGELOG.md, measured history, 2026-11-28)
    max_batch_delay_ms: int = Field(default=5, ge=0)
    # how soon a dead worker's intervals move on; the broker's group.min.session.timeout.ms
    # must allow it (1 s in the local stack and compose, 6 s by Kafka's default); the
    # heartbeat is a tenth of it
    session_timeout_ms: int = Field(default=1500, ge=500, le=300_000)
    # per interval: the most keys whose decoded state is kept in memory (the least recently
    # used beyond it are forgotten between batches, and read again when next used)
    max_cache_keys: int = Field(default=100_000, ge=1)
    # at acquisition, an interval's whole state is read when it is at most this many MiB
    # (and at most max_cache_keys keys), so a key not cached then is served without a
    # read from the store (runtime/state_cache.py); 0: each key read on first use
    whole_state_mb: int = Field(default=64, ge=0)
    report_interval_ms: int = Field(default=50, ge=10, le=5000)  # watermark reports
    # seen ids older than the input watermark minus this are forgotten (late injector
    # data re-sent within it is still dropped as a duplicate)
    seen_gc_slack_ms: int = Field(default=60_000, ge=0)
    # productions and watermark reports wait until Kafka holds the commit witness
    # (runtime/witness.py); off: the witness only detects a loss older than its last write
    witness_gate: bool = True
    # after a stop on a store behind the commit witness, an operator who chose to go on
    # from the older state sets this once (docs/reliability.md): the loss is logged, not fatal
    accept_store_rollback: bool = False


@dataclass(frozen=True)
class Tuning:
    """The runtime's own knobs: not settings (no variable sets them but the test plumbing's
    ``MW_LATENCY_OUT``); tests and benchmarks vary them in code."""

    # after a batch is redone (runtime/effects.py), each call's state is encoded at once
    # for at least this long: a steady stream of failing records is not redone batch by batch
    careful_s: float = 30.0
    refence_backoff_s: float = 10.0  # after losing an interval to another grant
    poll_records: int = 5000  # the most messages one poll takes
    # each commit turn's checkpoints are written while the next batch is built
    # (worker.py, "commits"); off: the worker waits for the store's reply (tests of both)
    overlap_commits: bool = True
    # productions="transactional": each interval's transaction is sent on a thread of a
    # pool while the loop goes on (runtime/transactional.py); off: the loop waits for it
    # (docs/benchmarks.md, "Transactional productions": a lower latency overlapped)
    overlap_transactions: bool = True
    latency_out: str = ""  # if set: record commit latency, write percentiles here at exit


def check_bootstrap(v: str) -> str:
    """Bootstrap servers (``ValueError`` unless each is host:port)."""
    for part in v.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{part!r} is not host:port")
    return v


def check_namespace(v: str) -> str:
    """A namespace (``ValueError`` unless it is letters, digits, ``_`` and ``-``)."""
    if not re.match(NAMESPACE_PATTERN, v):
        raise ValueError(
            f"{v!r:.80} is not a namespace: 1 to 63 letters, digits, '_' or '-', starting with "
            "a letter or digit (it names topics, groups and Redis keys)"
        )
    return v


def check_secret(v: SecretStr | None) -> SecretStr | None:
    """The pipeline secret (``ValueError`` when it is too short)."""
    if v is not None and len(v.get_secret_value()) < MIN_SECRET_CHARS:
        raise ValueError(f"needs at least {MIN_SECRET_CHARS} characters")
    return v


def check_redis_url(v: str) -> str:
    """A Redis URL (``ValueError`` unless it is ``redis://``, ``rediss://`` or ``unix://``)."""
    if not v.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("must start with redis://, rediss:// or unix://")
    return v
