"""Fixtures of the library's own tests: a real redis-server for the tests of what runs
on Redis (scripts, the store, command packing), started once per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mwcore.tools.stack.localstack import RedisServer


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(directory=Path(tmp_path_factory.mktemp("redis"))).start()
    yield server
    server.stop()


@pytest.fixture
def client(redis_server: RedisServer) -> redis.Redis:
    """A client of ``redis_server``, emptied first."""
    c = redis.Redis(port=redis_server.port)
    c.flushall()
    return c
