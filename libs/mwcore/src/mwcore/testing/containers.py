"""Container fixtures for users' tests: Kafka, Redis and a schema registry in containers
(through ``testcontainers``), and ``mw_run``, which runs a computation as a real worker
process against them and reads what it produced.

A pytest plugin, registered by ``mwcore[testing]``'s entry point (``pytest11``), so the
fixtures are there in any test of a project that installs it::

    def test_running_sum(mw_run: RunOnContainers) -> None:
        numbers = [("a", {"n": 1}), ("a", {"n": 2})]  # (key, value), timestamps 1 and 2
        run = mw_run(RunningSum, {"numbers": numbers}, expect={"sums": 2})
        assert [s["total"] for s in run.values("sums")] == [1, 3]

The fixtures:

- ``mw_kafka``: one Apache Kafka node (KRaft, broker and controller), its listener for
  this host on a free loopback port (``.bootstrap``, ``127.0.0.1:<port>``);
- ``mw_redis``: ``redis-server`` with an append-only file synced at every write, as the
  kit's checkpoints need (``.url``, ``redis://127.0.0.1:<port>/0``);
- ``mw_schema_registry``: Apicurio Registry 3, its Confluent-compatible API (``.url``,
  ``http://127.0.0.1:<port>/apis/ccompat/v7``);
- ``mw_containers``: the three;
- ``mw_run``: ``mw_run(computation, inputs, ...)`` runs ``python -m mwcore run`` of the
  computation on them, in a namespace of its own, and returns a ``Run``: its outputs
  decoded, per stream (``RunOnContainers.__call__`` says how).

Their images are those ``make images`` builds in the mwcore repository (no container
registry needs to be reachable), or those ``MW_TEST_KAFKA_IMAGE``,
``MW_TEST_REDIS_IMAGE`` and ``MW_TEST_REGISTRY_IMAGE`` name (an image configured as the
public ``apache/kafka``, ``redis`` and ``apicurio/apicurio-registry`` images are). They
live for a session unless the ini option ``mw_containers_scope`` says otherwise
(``module``, ``class``, ``function``, ``package``). Where no Docker engine answers, or
an image is not there, a test using them is skipped with the reason. Testcontainers'
reaper (Ryuk) is used where its image is there, and turned off otherwise; the fixtures
remove their containers when they end either way.

Nothing heavy is imported until a fixture is used: the plugin loads into every pytest
run of a project that installs ``mwcore[testing]``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import pytest

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

    from mwcore.api.computation import Computation
    from mwcore.runtime.harness import Produced
    from mwcore.serde.avro import SchemaRegistry
    from mwcore.serde.typed import Typed

KAFKA_IMAGE = "mwlocal/kafka:4.1.1"
REDIS_IMAGE = "mwlocal/redis:7"
REGISTRY_IMAGE = "mwlocal/apicurio-registry:3.3.3"
# component -> (the variable that names another image, the default)
IMAGES = {
    "kafka": ("MW_TEST_KAFKA_IMAGE", KAFKA_IMAGE),
    "redis": ("MW_TEST_REDIS_IMAGE", REDIS_IMAGE),
    "registry": ("MW_TEST_REGISTRY_IMAGE", REGISTRY_IMAGE),
}
SCOPE_OPTION = "mw_containers_scope"
ScopeName = Literal["session", "package", "module", "class", "function"]
SCOPES: tuple[ScopeName, ...] = ("session", "package", "module", "class", "function")
CCOMPAT_PATH = "/apis/ccompat/v7"
KAFKA_HOST_LISTENER = 29092  # the container's listener for this host (advertised as 127.0.0.1:<port>)
START_TIMEOUT_S = 180.0  # a JVM in a container on a small, busy host


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        SCOPE_OPTION,
        "scope of mwcore's container fixtures (mw_kafka, mw_redis, mw_schema_registry, mw_containers): "
        "session (the default), package, module, class or function",
        default="session",
    )


def pytest_configure(config: pytest.Config) -> None:
    _scope_of(config)  # a usage error at start, not one per fixture


def _scope_of(config: pytest.Config) -> ScopeName:
    scope = str(config.getini(SCOPE_OPTION) or "session").strip()
    if scope not in SCOPES:
        raise pytest.UsageError(f"{SCOPE_OPTION} = {scope!r}: one of {', '.join(SCOPES)}")
    return scope


def containers_scope(fixture_name: str, config: pytest.Config) -> ScopeName:
    """The containers' scope: the ini option ``mw_containers_scope`` (pytest's dynamic scope)."""
    return _scope_of(config)


# -- the containers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaContainer:
    bootstrap: str  # 127.0.0.1:<port>
    image: str
    container: DockerContainer


@dataclass(frozen=True)
class RedisContainer:
    url: str  # redis://127.0.0.1:<port>/0
    image: str
    container: DockerContainer


@dataclass(frozen=True)
class RegistryContainer:
    url: str  # http://127.0.0.1:<port>/apis/ccompat/v7
    image: str
    container: DockerContainer


@dataclass(frozen=True)
class Containers:
    kafka: KafkaContainer
    redis: RedisContainer
    schema_registry: RegistryContainer


def engine() -> Any:
    """A client of the Docker engine (``DOCKER_HOST``, else the local socket); the test is
    skipped, with the reason, where testcontainers is not installed or no engine answers."""
    try:
        import docker
        import testcontainers  # noqa: F401
    except ImportError:
        pytest.skip("mwcore's container fixtures need testcontainers: pip install 'mwcore[testing]'")
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception:
        pytest.skip(
            f"no Docker engine answers at {where}: start dockerd (or Docker Desktop), "
            "or set DOCKER_HOST to an engine that answers"
        )
    return client


def image_of(client: Any, component: str) -> str:
    """The image of ``component`` (its ``MW_TEST_*_IMAGE``, else the default); the test is
    skipped where the engine does not have it (nothing is pulled)."""
    import docker.errors

    variable, default = IMAGES[component]
    image = os.environ.get(variable) or default
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.skip(
            f"image {image} is missing: run `make images` in the mwcore repository (or `docker pull` it), "
            f"or set {variable} to an image that is there"
        )
    return image


def _reaper_where_possible(client: Any) -> None:
    """Testcontainers' reaper (Ryuk, a container that removes the session's containers if
    the test process dies) where its image is there; off otherwise (it cannot be pulled
    where no container registry is reachable). The fixtures remove theirs either way."""
    import docker.errors
    from testcontainers.core.config import testcontainers_config

    if testcontainers_config.ryuk_disabled:
        return
    try:
        client.images.get(testcontainers_config.ryuk_image)
    except docker.errors.ImageNotFound:
        testcontainers_config.ryuk_disabled = True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _published(container: DockerContainer, inside: int, port: int) -> DockerContainer:
    """``inside`` published on ``port`` of this host's loopback only."""
    container.ports[f"{inside}/tcp"] = cast(Any, ("127.0.0.1", port))
    return container


def _log_tail(container: DockerContainer, lines: int = 30) -> str:
    try:
        out = container.get_wrapped_container().logs(tail=lines)
    except Exception as exc:  # the container is gone
        return f"(no logs: {exc})"
    return bytes(out).decode(errors="replace")


def _wait(ready: Callable[[], bool], container: DockerContainer, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status in ("exited", "dead"):
            raise RuntimeError(f"{what} ({container.image}) exited at start:\n{_log_tail(container)}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{what} ({container.image}) not ready after {timeout:.0f} s:\n{_log_tail(container)}"
            )
        time.sleep(0.5)


@dataclass
class _Started:
    container: DockerContainer
    port: int


def _start(make: Callable[[int], DockerContainer], attempts: int = 3) -> _Started:
    """A container started with a free host port (another if that one was taken meanwhile)."""
    for attempt in range(attempts):
        port = free_port()
        container = make(port)
        _reaper_where_possible(container.get_docker_client().client)
        try:
            container.start()
        except Exception:
            container.stop()
            if attempt + 1 == attempts:
                raise
            continue
        return _Started(container, port)
    raise AssertionError("unreachable")


def kafka_env(port: int) -> dict[str, str]:
    """One KRaft node, broker and controller, configured as the public ``apache/kafka``
    image reads it (each ``KAFKA_*`` variable a broker setting), with the settings the kit
    rests on: no topic created on first use, rebalances at once, sessions from 1 s."""
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://:9092,CONTROLLER://:9093,HOST://:{KAFKA_HOST_LISTENER}",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://localhost:9092,HOST://127.0.0.1:{port}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,HOST:PLAINTEXT",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_NUM_PARTITIONS": "1",
        "KAFKA_HEAP_OPTS": "-Xmx512m -Xms128m",
    }


def start_kafka(image: str) -> Iterator[KafkaContainer]:
    """The broker's container, until the generator is closed (then removed)."""
    from testcontainers.core.container import DockerContainer

    from mwcore.transport.topics import broker_ready

    def make(port: int) -> DockerContainer:
        return _published(DockerContainer(image).with_envs(**kafka_env(port)), KAFKA_HOST_LISTENER, port)

    started = _start(make)
    try:
        bootstrap = f"127.0.0.1:{started.port}"
        _wait(lambda: broker_ready(bootstrap), started.container, "the Kafka broker", START_TIMEOUT_S)
        yield KafkaContainer(bootstrap, image, started.container)
    finally:
        started.container.stop()


def redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(image: str) -> Iterator[RedisContainer]:
    from testcontainers.core.container import DockerContainer

    command = ["redis-server", "--protected-mode", "no", "--appendonly", "yes", "--appendfsync", "always"]

    def make(port: int) -> DockerContainer:
        return _published(DockerContainer(image).with_command(command), 6379, port)

    started = _start(make)
    try:
        _wait(lambda: redis_answers(started.port), started.container, "Redis", START_TIMEOUT_S)
        yield RedisContainer(f"redis://127.0.0.1:{started.port}/0", image, started.container)
    finally:
        started.container.stop()


def registry_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_registry(image: str) -> Iterator[RegistryContainer]:
    from testcontainers.core.container import DockerContainer

    env = {
        "QUARKUS_HTTP_PORT": "8080",
        "APICURIO_STORAGE_KIND": "sql",
        "APICURIO_STORAGE_SQL_KIND": "h2",
        "APICURIO_DATASOURCE_URL": "jdbc:h2:mem:registry;DB_CLOSE_DELAY=-1",
        "APICURIO_DATASOURCE_USERNAME": "sa",
        "APICURIO_DATASOURCE_PASSWORD": "sa",
    }

    def make(port: int) -> DockerContainer:
        return _published(DockerContainer(image).with_envs(**env), 8080, port)

    started = _start(make)
    try:
        url = f"http://127.0.0.1:{started.port}{CCOMPAT_PATH}"
        _wait(lambda: registry_answers(url), started.container, "the schema registry", START_TIMEOUT_S)
        yield RegistryContainer(url, image, started.container)
    finally:
        started.container.stop()


def _started(component: str, start: Callable[[str], Iterator[Any]]) -> Iterator[Any]:
    client = engine()
    try:
        image = image_of(client, component)
    finally:
        client.close()
    yield from start(image)


@pytest.fixture(scope=containers_scope)
def mw_kafka() -> Iterator[KafkaContainer]:
    """One Kafka node in a container: ``.bootstrap`` (``127.0.0.1:<port>``)."""
    yield from _started("kafka", start_kafka)


@pytest.fixture(scope=containers_scope)
def mw_redis() -> Iterator[RedisContainer]:
    """``redis-server`` in a container, every write on disk before it is acknowledged: ``.url``."""
    yield from _started("redis", start_redis)


@pytest.fixture(scope=containers_scope)
def mw_schema_registry() -> Iterator[RegistryContainer]:
    """Apicurio Registry in a container: ``.url``, its Confluent-compatible API."""
    yield from _started("registry", start_registry)


@pytest.fixture(scope=containers_scope)
def mw_containers(
    mw_kafka: KafkaContainer, mw_redis: RedisContainer, mw_schema_registry: RegistryContainer
) -> Containers:
    """Kafka, Redis and the schema registry, in containers."""
    return Containers(mw_kafka, mw_redis, mw_schema_registry)


@pytest.fixture
def mw_run(mw_containers: Containers, tmp_path: Path) -> RunOnContainers:
    """``mw_run(computation, inputs, ...)``: the computation run as a worker process on
    the containers, its outputs read back (``RunOnContainers``)."""
    return RunOnContainers(mw_containers, tmp_path)


# -- running a computation on them --------------------------------------------------------------

# an input record: (key, value) or (key, value, timestamp in ms)
Send = tuple[str, Any] | tuple[str, Any, int]
# inherited MW_* variables a worker of mw_run keeps; it is given its own addresses and namespace
_INHERITED = ("MW_CORE", "MW_LOG_", "MW_UNSAFE_", "MW_KAFKA_", "MW_TEST_")


@dataclass(frozen=True)
class Run:
    """What ``mw_run`` ran: the outputs decoded, as ``Harness`` gives them (dicts, or
    the output's declared type; each stream's records by partition, in the order
    produced: each key's in order), the namespace, and the worker's log."""

    computation: str
    namespace: str
    outputs: Mapping[str, list[Produced]]
    log: str

    def output(self, stream: str) -> list[Produced]:
        if stream not in self.outputs:
            raise KeyError(f"{stream!r} is not an output of {self.computation}")
        return self.outputs[stream]

    def values(self, stream: str) -> list[Any]:
        return [p.value for p in self.output(stream)]


class RunOnContainers:
    """``mw_run``: runs computations on the containers, one namespace per run."""

    def __init__(self, containers: Containers, workdir: Path) -> None:
        self.containers = containers
        self.workdir = workdir

    def __call__(
        self,
        computation: type[Computation[Any]] | str,
        inputs: Mapping[str, Iterable[Send]],
        *,
        expect: Mapping[str, int] | None = None,
        finish: bool = True,
        schemas: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        quiet_s: float = 1.0,
    ) -> Run:
        """Run ``computation`` (a class, or ``"module:Class"``) as ``python -m mwcore run``
        against the containers, in a namespace of its own, fed ``inputs``; its outputs,
        decoded, once it is done.

        ``inputs``: stream -> records, each ``(key, value)`` or ``(key, value,
        timestamp)`` (a dict, or the input's declared type; the timestamp in ms, else the
        record's position in its list, from 1), written in the
        kit's framing (``MW_WIRE``, else Confluent's, the schema registered in the
        registry) after the worker has made its topics.

        Done means: the worker has committed every input record, then (with ``finish``)
        its input watermark is set to the end of time, so its event-time timers fire as
        at the end of input (``MW_WATERMARK=redis``), then no output has grown for
        ``quiet_s`` and each stream of ``expect`` (stream -> records) holds that many.
        The worker is stopped (SIGTERM: it drains) and the outputs read. ``TimeoutError``
        after ``timeout`` s, with what was missing and the worker's log; a worker that
        stops by itself is an error with its log.

        ``schemas``: the Avro schemas' directory (else the project's ``schemas/``, found
        from the current directory up); ``env``: more settings of the worker (``MW_*``).
        The worker finds modules where this process does (its ``sys.path``)."""
        from mwcore.api.computation import load_computation
        from mwcore.serde.avro import find_schemas

        if isinstance(computation, str):
            target, cls = computation, load_computation(computation)
        else:
            target, cls = f"{computation.__module__}:{computation.__qualname__}", computation
        declared = {i.stream for i in cls.inputs}
        unknown = sorted(set(inputs) - declared)
        if unknown:
            raise ValueError(
                f"{cls.name} reads no stream {', '.join(unknown)} (its inputs: {sorted(declared)})"
            )
        if expect:
            outputs = {o.stream for o in cls.outputs}
            if set(expect) - outputs:
                raise ValueError(f"{cls.name} produces no stream {', '.join(sorted(set(expect) - outputs))}")
        schemas_dir = Path(schemas) if schemas is not None else find_schemas()
        namespace = f"t{uuid.uuid4().hex[:12]}"
        worker = _Worker(self.containers, cls, target, namespace, schemas_dir, env or {}, self.workdir)
        deadline = time.monotonic() + timeout
        try:
            worker.start(deadline)
            worker.write(inputs)
            worker.wait_consumed(deadline)
            if finish:
                worker.finish()
            worker.wait_done(dict(expect or {}), quiet_s, deadline)
        finally:
            worker.stop()
        return Run(target, namespace, worker.read_outputs(), worker.log_text())


class _Worker:
    """One ``mw_run``: the worker process, and what it reads and writes."""

    def __init__(
        self,
        containers: Containers,
        cls: type[Computation[Any]],
        target: str,
        namespace: str,
        schemas_dir: Path,
        env: Mapping[str, str],
        workdir: Path,
    ) -> None:
        from mwcore.serde.framing import DEFAULT_WIRE, check_wire
        from mwcore.transport.topics import topic_name

        self.containers = containers
        self.bootstrap = containers.kafka.bootstrap
        self.cls = cls
        self.target = target
        self.namespace = namespace
        self.schemas_dir = schemas_dir
        self.log = workdir / f"{cls.name}-{namespace}.log"
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.upper().startswith("MW_") or k.upper().startswith(_INHERITED)
        }
        self.env = {
            **inherited,
            "MW_BOOTSTRAP": self.bootstrap,
            "MW_REDIS_URL": containers.redis.url,
            "MW_SCHEMA_REGISTRY_URL": containers.schema_registry.url,
            "MW_SCHEMAS_DIR": str(schemas_dir),
            "MW_NAMESPACE": namespace,
            "MW_WATERMARK": "redis",  # set here: the end of time once the input is in (finish)
            "MW_WORKER_ID": f"mw-run-{namespace}",
            "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path if isinstance(p, str)),
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.wire = check_wire(self.env.get("MW_WIRE") or DEFAULT_WIRE, "MW_WIRE")
        self.input_topics = {i.stream: topic_name(namespace, i.stream) for i in cls.inputs}
        self.output_topics = {o.stream: topic_name(namespace, o.stream) for o in cls.outputs}
        self.proc: subprocess.Popen[bytes] | None = None
        self._registry: SchemaRegistry | None = None
        self._types: dict[str, Typed] | None = None

    # -- the process

    def start(self, deadline: float) -> None:
        from mwcore.transport.topics import partition_counts

        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mwcore", "run", self.target],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=os.getcwd(),
            )
        topics = [*self.input_topics.values(), *self.output_topics.values()]
        self._until(
            lambda: len(partition_counts(self.bootstrap, topics)) == len(set(topics)), deadline, "its topics"
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def _until(
        self, done: Callable[[], bool], deadline: float, what: str, missing: Callable[[], str] = str
    ) -> None:
        while not done():
            if not self.alive():
                code = None if self.proc is None else self.proc.returncode
                raise RuntimeError(
                    f"the worker of {self.target} stopped (exit code {code}) while waiting for {what}; "
                    f"its log:\n{self._tail()}"
                )
            if time.monotonic() > deadline:
                detail = missing()
                raise TimeoutError(
                    f"mw_run of {self.target}: no {what} in time{': ' + detail if detail else ''}; "
                    f"the worker's log:\n{self._tail()}"
                )
            time.sleep(0.2)

    def _tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # -- schemas

    def registry(self) -> SchemaRegistry:
        """The schemas directory, with writer schemas learnt by id from the registry."""
        if self._registry is None:
            from mwcore.serde.avro import SchemaRegistry
            from mwcore.transport.schema_registry import RegistryAccess, RegistryClient

            self._registry = SchemaRegistry.from_directory(self.schemas_dir)
            self._registry.use_ids(RegistryClient(RegistryAccess(self.containers.schema_registry.url)))
        return self._registry

    def types(self) -> dict[str, Typed]:
        """stream -> its declared type (``Input``/``Output(type=...)``) and converters."""
        if self._types is None:
            from mwcore.runtime.layout import stream_types

            self._types = stream_types(self.cls, self.registry())
        return self._types

    # -- input

    def write(self, inputs: Mapping[str, Iterable[Send]]) -> None:
        from mwcore.api.signing import UNSIGNED, Signer
        from mwcore.serde.typed import plain
        from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
        from mwcore.transport.writer import SourceWriter

        secret = self.env.get("MW_ID_SECRET")
        signer = Signer(secret, cast(Any, self.env.get("MW_MAC_V1") or "off")) if secret else UNSIGNED
        client = RegistryClient(RegistryAccess(self.containers.schema_registry.url))
        try:
            for inp in self.cls.inputs:
                records = list(inputs.get(inp.stream, ()))
                if not records:
                    continue
                if inp.schema is None:
                    raise ValueError(f"input {inp.stream} of {self.cls.name} declares no schema")
                writer = SourceWriter(
                    self.bootstrap,
                    self.registry(),
                    self.input_topics[inp.stream],
                    inp.schema,
                    wire=inp.wire or self.wire,
                    schema_registry=client,
                    signer=signer,
                )
                declared = self.types().get(inp.stream)
                for position, record in enumerate(records, start=1):
                    key, value, timestamp = _record(inp.stream, record, position)
                    writer.write(key, plain(value) if declared is None else declared.write(value), timestamp)
                writer.flush()
        finally:
            client.close()

    def wait_consumed(self, deadline: float) -> None:
        """Until the worker has committed every record of its inputs (those read as they
        are keyed; a re-keyed input is waited for by the outputs' quiet)."""
        from mwcore.transport.topics import committed_offsets, end_offsets, partition_counts

        direct = [self.input_topics[i.stream] for i in self.cls.inputs if i.key is None]
        counts = partition_counts(self.bootstrap, direct)
        ends = {tp: end for tp, end in end_offsets(self.bootstrap, counts).items() if end > 0}
        group = _group(self.namespace, self.cls.name)
        left: dict[tuple[str, int], int] = dict(ends)

        def consumed() -> bool:
            got = committed_offsets(self.bootstrap, group, counts)
            for tp, end in list(left.items()):
                if got.get(tp, -1) >= end:
                    del left[tp]
            return not left

        self._until(
            consumed, deadline, "commit of its input", lambda: f"partitions not through: {sorted(left)}"
        )

    def finish(self) -> None:
        """The computation's input watermark at the end of time: its event-time timers fire."""
        from mwcore.api.clock import MAX_WATERMARK
        from mwcore.store.client import redis_client

        client = redis_client(self.containers.redis.url)
        try:
            client.set(f"mw:wm:{self.namespace}:{self.cls.name}", MAX_WATERMARK)
        finally:
            client.close()

    # -- output

    def _ends(self) -> dict[tuple[str, int], int]:
        from mwcore.transport.topics import end_offsets, partition_counts

        counts = partition_counts(self.bootstrap, list(self.output_topics.values()))
        return end_offsets(self.bootstrap, counts)

    def wait_done(self, expect: dict[str, int], quiet_s: float, deadline: float) -> None:
        """Until no output has grown for ``quiet_s`` and each stream of ``expect`` holds
        that many records."""
        ends = self._ends()
        changed = time.monotonic()
        counted: dict[str, int] = {}
        stale = True

        def done() -> bool:
            nonlocal ends, changed, counted, stale
            now = self._ends()
            if now != ends:
                ends, changed, stale = now, time.monotonic(), True
            if expect and stale:
                counted = {s: len(v) for s, v in self.read_outputs(list(expect)).items()}
                stale = False
            enough = all(counted.get(s, 0) >= n for s, n in expect.items())
            return enough and time.monotonic() - changed >= quiet_s

        def missing() -> str:
            short = [f"{s}: {counted.get(s, 0)} of {n}" for s, n in expect.items() if counted.get(s, 0) < n]
            return ", ".join(short) or f"outputs still growing within {quiet_s} s"

        self._until(done, deadline, "end of its output", missing)

    def read_outputs(self, streams: list[str] | None = None) -> dict[str, list[Produced]]:
        """The output streams decoded (each production once: a re-sent one has its id)."""
        from mwcore.api.headers import is_reserved
        from mwcore.api.record import ID_HEADER
        from mwcore.runtime.harness import Produced
        from mwcore.serde.avro import decode_any
        from mwcore.serde.framing import SCHEMA_ID_HEADER, with_schema_id_header
        from mwcore.transport.archive import plan, read_slices

        wanted = list(self.output_topics) if streams is None else streams
        out: dict[str, list[tuple[int, int, Produced]]] = {s: [] for s in wanted}
        seen: set[bytes] = set()
        registry = self.registry()
        types = self.types()

        def take(piece: Any, msg: Any) -> None:
            headers = list(msg.headers() or [])
            rid = next((bytes(v) for n, v in headers if n == ID_HEADER and v is not None), b"")
            if rid and rid in seen:
                return
            seen.add(rid)
            data = msg.value() or b""
            named = [v for n, v in headers if n == SCHEMA_ID_HEADER]
            framed = with_schema_id_header(named[-1] or b"", data) if named else data
            _, value = decode_any(registry, framed)
            declared = types.get(piece.stream)
            if declared is not None and type(value) is dict:
                value = declared.read(value)
            user = tuple((n, bytes(v or b"")) for n, v in headers if not is_reserved(n))
            key = (msg.key() or b"").decode()
            produced = Produced(key, value, msg.timestamp()[1], rid, user)
            out[piece.stream].append((msg.partition(), msg.offset(), produced))

        pieces = plan(self.bootstrap, wanted, namespace=self.namespace)
        read_slices(self.bootstrap, pieces, take)
        return {s: [p for _, _, p in sorted(got, key=lambda t: (t[0], t[1]))] for s, got in out.items()}


def _group(namespace: str, computation: str) -> str:
    from mwcore.transport.topics import topic_name

    return topic_name(namespace, f"mw.{computation}")  # as runtime.layout names it


def _record(stream: str, record: Any, position: int) -> tuple[str, Any, int]:
    if not isinstance(record, tuple) or len(record) not in (2, 3):
        raise ValueError(f"a record of {stream} is (key, value) or (key, value, timestamp), not {record!r}")
    key, value, timestamp = (*record, position) if len(record) == 2 else record
    if not isinstance(key, str):
        raise ValueError(f"a record of {stream}: its key is a str, not {key!r}")
    return key, value, int(timestamp)
