"""A process's surface is closed to whoever shares its machine or network (semantics
I-12): metrics on 127.0.0.1 with bounded connections, a password in a Redis URL never
printed, a namespace that would break the keys refused, ``mw up``'s state trusted only
from a private file naming a live ``mw up``, and a service that dies under ``mw up``
said at once, listed, and made its exit code.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mwcore.tools.stack.localproc import free_port
from mwcore.tools.stack.localstack import LocalStack
from testbed.hostile import records_in
from testbed.procs import WorkerProc, wait_until, worker_env
from tests.conftest import ROOT

pytestmark = pytest.mark.hostile


def _listening_addresses(pid: int, port: int) -> set[str]:
    """The local addresses ``pid`` listens on ``port`` at (from /proc/<pid>/net/tcp*)."""
    out = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            addr, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:  # LISTEN
                out.add(addr)
    return out


def test_metrics_listen_on_loopback_and_idle_connections_cannot_exhaust_the_process(
    stack: LocalStack, namespace: str, log_dir: Path
) -> None:
    """By default the metrics and health server listens on 127.0.0.1 only; 60 connections
    that never send a request make no thread each and do not keep ``/metrics`` away for
    longer than a request's timeout."""
    port = free_port()
    env = worker_env(stack, namespace, MW_METRICS_PORT=str(port))
    worker = WorkerProc("mwcore.examples.running_sum:RunningSum", env, log_dir, "sum").start()
    idle: list[socket.socket] = []
    try:
        wait_until(lambda: worker.ready, 60, what="the worker to join")
        assert _listening_addresses(worker.pid, port) == {"0100007F"}  # 127.0.0.1, nothing else

        def threads() -> int:
            return int(Path(f"/proc/{worker.pid}/status").read_text().split("Threads:")[1].split()[0])

        before = threads()
        for _ in range(60):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        began = time.monotonic()
        wait_until(lambda: _answers(port), 15, 0.2, "/metrics past the idle connections")
        assert time.monotonic() - began < 12
        assert threads() <= before + 8, (before, threads())  # the server took them all by now
    finally:
        for s in idle:
            s.close()
        worker.terminate()


def _answers(port: int) -> bool:
    import http.client

    try:
        records_in(port)
        return True
    except (OSError, http.client.HTTPException):
        return False


def _mw(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mwcore", *args],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("MW_")},
            "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
            **env,
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hunter2-password@127.0.0.1:{port}/0",
        "redis://worker:hunter2-password@127.0.0.1:{port}/0",
        "redis://127.0.0.1:{port}/0?password=hunter2-password",
        "rediss://127.0.0.1:{port}/0?ssl_password=hunter2-password",
        "redis://127.0.0.1:{port}/0?ssl_password=hunter2-password",  # a parameter of rediss:// only
    ],
)
def test_a_password_in_a_redis_url_is_never_printed(url: str) -> None:
    """A Redis that is not there stops the worker with one line, exit code 2, and the
    line shows the URL without its password, wherever the URL carried it (the user
    part, ``?password=``, ``?ssl_password=``: every parameter whose name says secret)."""
    closed = free_port()
    done = _mw(
        ["run", "mwcore.examples.running_sum:RunningSum"],
        {"MW_REDIS_URL": url.format(port=closed), "MW_BOOTSTRAP": f"127.0.0.1:{free_port()}"},
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "hunter2" not in done.stderr + done.stdout, done.stderr


def test_a_secret_in_the_schema_registry_url_is_never_printed(stack: LocalStack) -> None:
    """A schema registry that is not there stops the worker with one line, exit code 2,
    the URL shown without its password and its ``?token=``."""
    url = f"http://reader:hunter2-password@127.0.0.1:{free_port()}/apis/ccompat/v7?token=hunter2-token"
    done = _mw(
        ["run", "mwcore.examples.running_sum:RunningSum"],
        {
            "MW_REDIS_URL": stack.redis_url,
            "MW_BOOTSTRAP": stack.bootstrap,
            "MW_SCHEMA_REGISTRY_URL": url,
            "MW_NAMESPACE": f"secret-url-{os.getpid()}",
        },
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "schema registry" in lines[0] and "reader:***@" in lines[0], lines[0]
    assert "hunter2" not in done.stderr + done.stdout, done.stderr


@pytest.mark.parametrize("bad", ["a}b", "a{b", "a b", "x" * 200, "../up"])
def test_a_namespace_that_would_break_the_keys_is_refused_at_start(bad: str) -> None:
    """``MW_NAMESPACE`` is part of every Redis key's hash tag and every topic name: one
    that would break them stops the process at start with one line, exit code 2."""
    done = _mw(
        ["run", "mwcore.examples.running_sum:RunningSum"],
        {"MW_NAMESPACE": bad, "MW_REDIS_URL": "redis://127.0.0.1:1/0", "MW_BOOTSTRAP": "127.0.0.1:1"},
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "MW_NAMESPACE" in done.stderr, done.stderr


def test_mw_down_trusts_only_a_private_state_file_naming_a_live_mw_up(tmp_path: Path) -> None:
    """A state file planted where ``mw up`` keeps its own: readable by others, it is
    ignored with a line saying so; private but naming a process that is not ``mw up``,
    ``mw down`` signals nothing (the process lives on). ``mw up``'s own file is written
    0600."""
    from mwcore.tools.up import runner

    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    victim = subprocess.Popen(["sleep", "60"])
    try:
        planted = runtime / "mw-up.json"
        planted.write_text(json.dumps({"pid": victim.pid, "bootstrap": "attacker:9092"}))
        planted.chmod(0o644)
        done = _mw(["down"], env)
        assert done.returncode == 1 and "not private" in done.stderr, done.stderr
        planted.chmod(0o600)
        done = _mw(["down"], env)
        assert done.returncode == 1 and "no `mw up` is running" in done.stderr, done.stderr
        assert victim.poll() is None  # never signalled
    finally:
        victim.kill()
        victim.wait()
    os.environ["XDG_RUNTIME_DIR"], saved = str(runtime), os.environ.get("XDG_RUNTIME_DIR")
    try:
        runner.announce(bootstrap="127.0.0.1:9092")
        assert (runtime / "mw-up.json").stat().st_mode & 0o777 == 0o600
    finally:
        if saved is None:
            del os.environ["XDG_RUNTIME_DIR"]
        else:
            os.environ["XDG_RUNTIME_DIR"] = saved


BOOM = """\
import sys, time
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 3)
print("mw: boom: the disk is full (free some space)", file=sys.stderr)
sys.exit(2)
"""
STEADY = "import time\nwhile True:\n    time.sleep(1)\n"


@pytest.mark.slow
def test_a_service_that_dies_under_mw_up_is_said_at_once_listed_and_fails_the_run(tmp_path: Path) -> None:
    """A project whose ``boom`` service exits 2 three seconds in, beside a steady one:
    ``mw up`` says so on stderr with its last error line while it runs, lists it in the
    summary's ``exited``, and exits 1."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mw]\nservices = "apps"\n\n[tool.mw.up]\nservices = ["steady", "boom"]\nstreams = {}\n'
    )
    (tmp_path / "schemas").mkdir()
    for name, main in (("steady", STEADY), ("boom", BOOM)):
        (tmp_path / "apps" / name).mkdir(parents=True)
        (tmp_path / "apps" / name / "__main__.py").write_text(main)
    (tmp_path / "apps" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MW_")}
    env["XDG_RUNTIME_DIR"] = str(tmp_path)
    stdout = tmp_path / "stdout"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mwcore", "up", "--duration", "40"],
        cwd=tmp_path,
        env=env,
        stdout=stdout.open("w"),
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[tuple[float, str]] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append((time.monotonic(), line.rstrip()))

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=300)
    finally:
        proc.kill()
    out = stdout.read_text()
    reader.join(10)
    ended = time.monotonic()
    stopped = [(t, line) for t, line in said if line.startswith("mw up: boom stopped")]
    assert stopped, said
    at, line = stopped[0]
    assert line == "mw up: boom stopped: exit code 2: mw: boom: the disk is full (free some space)", line
    assert ended - at > 20  # said while the run went on, not at its end
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["exited"] == [
        {
            "service": "boom",
            "exit_code": 2,
            "how": "exit code 2",
            "last_error": "mw: boom: the disk is full (free some space)",
        }
    ], summary
    assert proc.returncode == 1
