"""Fixtures for system tests: one local stack (Apache Kafka + redis-server) per session.

Each test works in its own namespace (topics, consumer groups and Redis keys), so
tests share the stack without seeing each other.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mwcore.serde.avro import SchemaRegistry
from mwcore.store.client import redis_client as connect_redis
from mwcore.tools.stack.localstack import LocalStack

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    s = LocalStack(workdir=tmp_path_factory.mktemp("stack"))
    s.start()
    try:
        with pytest.MonkeyPatch.context() as env:
            # what `mw stack` tells a shell: the kit's commands and Spark jobs run in the
            # tests' own process find the registry as a user's do
            if s.schema_registry_url is not None:
                env.setenv("MW_SCHEMA_REGISTRY_URL", s.schema_registry_url)
            yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A Docker engine (``dockerd`` started if none answers, and stopped after) with the
    images ``make images`` builds (``testbed/compose_project.engine``): the ``compose``
    tests' and the container fixtures' (``tests/test_containers.py``)."""
    from testbed.compose_project import engine

    with engine(tmp_path_factory.mktemp("docker") / "images.log"):
        yield


@pytest.fixture(scope="session")
def registry() -> SchemaRegistry:
    return SchemaRegistry.from_directory(ROOT / "schemas")


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    """Where a test's worker processes write their logs."""
    d = tmp_path / "logs"
    d.mkdir()
    yield d


@pytest.fixture
def redis_client(stack: LocalStack) -> redis.Redis:
    return connect_redis(stack.redis_url)


@pytest.fixture(scope="session")
def spark(stack: LocalStack) -> Iterator[object]:
    """A local[2] Spark session with the archive data source registered, started after the
    stack: its Python workers (where the data source's writer is made) inherit the
    environment at its start, MW_SCHEMA_REGISTRY_URL included, as a user's job does."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # the executors import the computations (services.*) by name
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession

    from mwcore.archive.spark import register
    from mwcore.archive.spark.session import KAFKA_CONNECTOR

    session = (
        SparkSession.builder.master("local[2]")
        .appName("mwcore-tests")
        .config("spark.jars.packages", KAFKA_CONNECTOR)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
