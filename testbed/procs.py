"""Worker processes for system tests: start, SIGKILL, SIGSTOP/SIGCONT, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from testbed import wire

ROOT = Path(__file__).resolve().parents[1]


# The variables of one Zeitgeist service's own settings class (services/*/settings.py),
# given to that service only: a process refuses an MW_* variable no setting of its own
# reads (mwcore/process/environment.py).
OWN_SETTINGS = {
    "injector": ("MW_INJECTOR_DIR", "MW_INJECTOR_JITTER_MS", "MW_INJECTOR_POLL_MS"),
    "dip_detector": ("MW_DETECTOR_",),
    "model_trainer": ("MW_MODEL_", "MW_SPARK_"),
}


def for_service(name: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the other services' own settings (``name`` None: a process of the
    kit's own, the authority say, which reads none of them)."""
    foreign = tuple(p for other, prefixes in OWN_SETTINGS.items() if other != name for p in prefixes)
    return {k: v for k, v in env.items() if not k.upper().startswith(foreign)}


def service_of(module: str, computation: str) -> str | None:
    """The Zeitgeist service a process runs (``python -m services.<name>``, or ``mw run
    services.<name>.computation:...``), or None."""
    for part in (module, computation):
        if part.startswith("services."):
            return part.split(".")[1].split(":")[0]
    return None


@dataclass
class WorkerProc:
    computation: str
    env: dict[str, str]
    log_dir: Path
    name: str
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None  # default: ("run", computation)
    module: str = "mwcore"  # python -m <module> <command...>
    cwd: Path = ROOT  # also where `python -m` finds the module

    def start(self, **extra: str) -> WorkerProc:
        self.starts += 1
        env = {**os.environ, **self.env, **extra, "MW_WORKER_ID": f"{self.name}-{self.starts}"}
        env = for_service(service_of(self.module, self.computation), env)
        log = open(self.log_dir / f"{self.name}-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                self.module,
                *(("run", self.computation) if self.command is None else self.command),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.cwd,
        )
        log.close()
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def terminate(self, timeout: float = 30) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def current_log(self) -> str:
        path = self.log_dir / f"{self.name}-{self.starts}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_has(self, text: str) -> bool:
        return text in self.current_log()

    @property
    def ready(self) -> bool:
        """Alive and holding its intervals (its current run logged an assignment)."""
        return self.alive and '"assigned"' in self.current_log()

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.log_dir.glob(f"{self.name}-*.log"))
        )


def listening_ports(pid: int) -> set[int]:
    """The TCP ports a process is listening on (its own sockets, read from /proc)."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            # local address (hex ip:port), remote address, state (0A: LISTEN), ..., inode
            if fields[3] == "0A" and fields[9] in inodes:
                ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports


class Background(threading.Thread):
    """A daemon thread running ``target(*args, **kwargs)`` that keeps the error it raised
    (``joined`` asserts there is none)."""

    def __init__(self, target: Callable[..., object], *args: object, **kwargs: object) -> None:
        super().__init__(daemon=True, name=getattr(target, "__name__", "background"))
        self._call = (target, args, kwargs)
        self.error: BaseException | None = None

    def run(self) -> None:
        target, args, kwargs = self._call
        try:
            target(*args, **kwargs)
        except BaseException as exc:
            self.error = exc


def joined(thread: threading.Thread, timeout: float, what: str) -> None:
    """Join ``thread``; fail if it is still running, or if it stored an error."""
    thread.join(timeout)
    assert not thread.is_alive(), f"{what} still running after {timeout}s"
    error = getattr(thread, "error", None)
    assert error is None, f"{what} failed: {error!r}"


def wait_until(predicate: object, timeout: float, interval: float = 0.1, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class Addresses(Protocol):
    """Where a test's workers find the broker, Redis and the schema registry (a
    ``LocalStack``, or a deployment on one)."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def redis_url(self) -> str: ...

    @property
    def schema_registry_url(self) -> str | None: ...


def worker_env(stack: Addresses, namespace: str, **extra: str) -> dict[str, str]:
    """The environment a worker process of a test needs."""
    return {
        "MW_BOOTSTRAP": stack.bootstrap,
        "MW_REDIS_URL": stack.redis_url,
        **wire.registry_env(stack),
        "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
        "MW_NAMESPACE": namespace,
        # Tests of the runtime drive event time by hand; the watermark tests pass
        # MW_WATERMARK=authority and run the authority.
        "MW_WATERMARK": "redis",
        **extra,
    }
