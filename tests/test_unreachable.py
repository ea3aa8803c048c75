"""Every service stops at start, within 15 s, with exit code 2 and one line naming the
setting to fix, when its broker or Redis cannot be used: a closed port, a password
missing or wrong, a database that does not exist; and the processes that keep state in
Redis when it can lose acknowledged writes (unless accepted on purpose). A session
timeout the broker refuses shows only at the group join: within 20 s."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwcore.tools.stack.localproc import free_port
from mwcore.tools.stack.localstack import LocalStack, RedisServer
from testbed.procs import wait_until
from tests.conftest import ROOT

SERVICES = {
    "windower": ["-m", "services.windower"],
    "dip_detector": ["-m", "services.dip_detector"],
    "authority": ["-m", "services.watermark_authority"],
    "injector": ["-m", "services.injector"],
    "mw run": ["-m", "mwcore", "run", "mwcore.examples.running_sum:RunningSum"],
}


def _redis(directory: Path, **kwargs: str) -> Iterator[RedisServer]:
    server = RedisServer(directory=directory, **kwargs).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis that requires the password ``sekret``."""
    yield from _redis(tmp_path_factory.mktemp("locked"), password="sekret")


def run(service: str, tmp_path: Path, **env: str) -> tuple[int, str, float]:
    own = {"MW_INJECTOR_DIR": str(tmp_path)} if service == "injector" else {}  # (its own setting only)
    full = {**os.environ, "MW_SCHEMAS_DIR": str(ROOT / "schemas"), "PYTHONPATH": str(ROOT), **own, **env}
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *SERVICES[service]], env=full, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("%")]
    return proc.returncode, "\n".join(lines), time.monotonic() - began


def cases(stack: LocalStack, locked: RedisServer) -> dict[str, tuple[dict[str, str], str]]:
    closed = f"127.0.0.1:{free_port()}"
    port = locked.port
    return {
        "broker on a closed port": (
            {"MW_BOOTSTRAP": closed, "MW_REDIS_URL": stack.redis_url},
            f"MW_BOOTSTRAP={closed}: cannot reach a Kafka broker",
        ),
        "redis on a closed port": (
            {"MW_BOOTSTRAP": stack.bootstrap, "MW_REDIS_URL": f"redis://{closed}/0"},
            f"MW_REDIS_URL=redis://{closed}/0: cannot reach Redis",
        ),
        "password missing": (
            {"MW_BOOTSTRAP": stack.bootstrap, "MW_REDIS_URL": f"redis://127.0.0.1:{port}/0"},
            "this Redis requires a password",
        ),
        "password wrong": (
            {"MW_BOOTSTRAP": stack.bootstrap, "MW_REDIS_URL": f"redis://:nope@127.0.0.1:{port}/0"},
            "Redis refused the user name or password",
        ),
        "database out of range": (
            {"MW_BOOTSTRAP": stack.bootstrap, "MW_REDIS_URL": f"redis://:sekret@127.0.0.1:{port}/99"},
            "this Redis has no database 99",
        ),
    }


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_unusable_dependencies_stop_the_service_with_one_line(
    service: str, stack: LocalStack, locked_redis: RedisServer, tmp_path: Path
) -> None:
    for case, (env, message) in cases(stack, locked_redis).items():
        code, err, took = run(service, tmp_path, **env)
        assert code == 2, f"{service}, {case}: exit {code}: {err}"
        assert len(err.splitlines()) == 1 and message in err, f"{service}, {case}: {err!r}"
        assert "Traceback" not in err and "sekret" not in err and "nope" not in err
        assert took < 15, f"{service}, {case}: took {took:.1f}s"


def test_a_session_timeout_the_broker_refuses_is_one_line(stack: LocalStack, tmp_path: Path) -> None:
    """The local broker allows 1 s and more: 600 ms is refused at the group join."""
    code, err, took = run(
        "mw run",
        tmp_path,
        MW_BOOTSTRAP=stack.bootstrap,
        MW_REDIS_URL=stack.redis_url,
        MW_NAMESPACE=f"sess{os.getpid()}",
        MW_SESSION_TIMEOUT_MS="600",
        MW_LOG_LEVEL="error",
    )
    assert code == 2, err
    assert "the broker refuses MW_SESSION_TIMEOUT_MS=600" in err and "Traceback" not in err, err
    assert took < 20


@pytest.fixture(scope="module")
def volatile_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis that can lose acknowledged writes in a crash (``appendfsync everysec``)."""
    yield from _redis(tmp_path_factory.mktemp("volatile"), appendfsync="everysec")


@pytest.mark.parametrize("service", ["authority", "dip_detector", "mw run", "windower"])
def test_a_volatile_store_is_refused_at_start(
    service: str, stack: LocalStack, volatile_redis: RedisServer, tmp_path: Path
) -> None:
    """The processes that keep state in Redis (workers, the authority's journal) refuse
    a store that can lose what it acknowledged, and say how to accept it."""
    code, err, took = run(service, tmp_path, MW_BOOTSTRAP=stack.bootstrap, MW_REDIS_URL=volatile_redis.url)
    assert code == 2, f"{service}: exit {code}: {err}"
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "appendfsync everysec" in err and "MW_ALLOW_VOLATILE_STORE=1" in err, err
    assert took < 15


def test_a_volatile_store_accepted_on_purpose_runs(
    stack: LocalStack, volatile_redis: RedisServer, tmp_path: Path
) -> None:
    """With ``MW_ALLOW_VOLATILE_STORE=1`` the same worker starts: it gets past the
    preflight, joins its group and takes its intervals over (the control that the
    refusal above comes from the check, not from something else)."""
    env = {
        **os.environ,
        "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
        "PYTHONPATH": str(ROOT),
        "MW_BOOTSTRAP": stack.bootstrap,
        "MW_REDIS_URL": volatile_redis.url,
        "MW_NAMESPACE": f"volatile{os.getpid()}",
        "MW_ALLOW_VOLATILE_STORE": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, *SERVICES["mw run"]], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_until(
            lambda: proc.poll() is not None or any('"interval_acquired"' in ln for ln in lines),
            60,
            0.1,
            "the worker to take an interval over, or to exit",
        )
        assert proc.poll() is None, "".join(lines)
    finally:
        proc.terminate()
        proc.wait(30)
