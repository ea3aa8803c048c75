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
- ``mw_run``: a ``RunOnContainers`` on them (``mwcore.testing.run_on_containers``, whose
  ``Run`` and ``RunOnContainers`` are importable from here too).

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
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import pytest

# mw_run's RunOnContainers (the standard library only at load), its names importable from here
from mwcore.testing.run_on_containers import Run as Run
from mwcore.testing.run_on_containers import RunOnContainers as RunOnContainers
from mwcore.testing.run_on_containers import Send as Send

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

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
    the containers, its outputs read back (``RunOnContainers``, in ``run_on_containers``)."""
    return RunOnContainers(mw_containers, tmp_path)
