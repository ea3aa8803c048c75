"""A local Apache Kafka broker, Redis and a schema registry for development and tests,
on free ports.

``LocalStack`` starts a ``redis-server`` with an append-only file, one Apache Kafka
node (``mwcore.tools.stack.kafka_broker``: KRaft, broker and controller at once) and an
Apicurio Registry (``schema_registry.py``; ``registry=None``: none), each with its data
and log under one work directory, waits until all answer, and stops them cleanly.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, Protocol

from mwcore.errors import ConfigError
from mwcore.store.client import redis_ready
from mwcore.tools.stack.kafka_broker import KafkaBroker
from mwcore.tools.stack.localproc import die_with_parent, free_port, kill_process, stop_process, wait_for_port
from mwcore.tools.stack.schema_registry import ApicurioRegistry

__all__ = ["LocalKafka", "LocalRedis", "LocalStack", "RedisServer", "free_port"]


@dataclass
class RedisServer:
    """A ``redis-server`` with its own directory; ``appendfsync`` as given."""

    port: int = 0
    directory: Path | None = None
    appendfsync: Literal["always", "everysec", "no"] = "always"
    password: str = ""  # requirepass, when set
    extra: tuple[str, ...] = ()  # more redis-server arguments
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20) -> RedisServer:
        exe = shutil.which("redis-server")
        if exe is None:
            raise ConfigError("redis-server is not installed (apt-get install redis-server)")
        if not self.port:
            self.port = free_port()
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="mw-redis-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            exe,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--daemonize", "no",
            "--logfile", str(self.directory / "redis.log"),
            *(("--requirepass", self.password) if self.password else ()),
            *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent
        )
        wait_for_port(self.port, self.proc, "redis-server", timeout)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not redis_ready(self.port, self.password):
            if time.monotonic() > deadline:
                raise TimeoutError("redis-server did not answer PING")
            time.sleep(0.05)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        kill_process(proc)


class LocalRedis(Protocol):
    """One Redis, or a local Redis Cluster (``tools/stack/redis_cluster.py``)."""

    directory: Path | None

    @property
    def url(self) -> str: ...
    def start(self, timeout: float = 20) -> LocalRedis: ...
    def stop(self) -> None: ...


class LocalKafka(Protocol):
    """One broker, or a local Kafka cluster (``tools/stack/kafka_cluster.py``)."""

    directory: Path | None
    product: str

    @property
    def bootstrap(self) -> str: ...
    def running_version(self) -> str: ...
    def start(self, timeout: float = 60) -> LocalKafka: ...
    def stop(self, timeout: float = 20) -> None: ...


@dataclass
class LocalStack:
    """Broker, Redis and schema registry for one test session or one ``mw up``."""

    workdir: Path | None = None
    broker: LocalKafka = field(default_factory=KafkaBroker)
    redis: LocalRedis = field(default_factory=RedisServer)
    registry: ApicurioRegistry | None = field(default_factory=ApicurioRegistry)
    _scratch: bool = field(default=False, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def redis_url(self) -> str:
        return self.redis.url

    @property
    def schema_registry_url(self) -> str | None:
        """The registry's Confluent-compatible API (None: the stack has none)."""
        return None if self.registry is None else self.registry.url

    def describe(self) -> dict[str, str]:
        """The broker as launched (its version as it logged it), as ``mw up`` reports it."""
        return {"product": self.broker.product, "version": self.broker.running_version()}

    def describe_registry(self) -> dict[str, str] | None:
        """The schema registry as launched (None: the stack has none), as ``mw up`` reports it."""
        if self.registry is None:
            return None
        r = self.registry
        return {"product": r.product, "version": r.running_version(), "url": r.url}

    def banner(self) -> str:
        b = self.describe()
        registry = "" if self.registry is None else f", schema registry {self.registry.url}"
        return f"{b['product']} {b['version']} at {self.bootstrap}, redis {self.redis_url}{registry}"

    def start(self) -> LocalStack:
        if self.workdir is None:
            # A directory of our own making is scratch: it goes when the stack stops.
            self.workdir = Path(tempfile.mkdtemp(prefix="mw-stack-"))
            self._scratch = True
        self.redis.directory = self.workdir / "redis"
        self.broker.directory = self.workdir / "kafka"
        if self.registry is not None:
            self.registry.directory = self.workdir / "registry"
        self.redis.start()
        try:
            if self.registry is not None:
                self.registry.launch()  # its JVM starts beside the broker's
            self.broker.start()
            if self.registry is not None:
                self.registry.wait_ready(90)
        except BaseException:
            self._stop_servers()
            raise
        return self

    def _stop_servers(self) -> None:
        try:
            if self.registry is not None:
                self.registry.stop()
        finally:
            try:
                self.broker.stop()
            finally:
                self.redis.stop()

    def stop(self) -> None:
        try:
            self._stop_servers()
        finally:
            if self._scratch and self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
