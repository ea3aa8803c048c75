"""Worker processes for system tests: start, SIGKILL, SIGSTOP/SIGCONT, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
    module: str = "mwcore.cli"  # python -m <module> <command...>
    cwd: Path = ROOT  # also where `python -m` finds the module

    def start(self, **extra: str) -> WorkerProc:
        self.starts += 1
        env = {**os.environ, **self.env, **extra, "MW_WORKER_ID": f"{self.name}-{self.starts}"}
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


def wait_until(predicate: object, timeout: float, interval: float = 0.1, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def worker_env(bootstrap: str, redis_url: str, namespace: str, **extra: str) -> dict[str, str]:
    """The environment a worker process of a test needs."""
    return {
        "MW_BOOTSTRAP": bootstrap,
        "MW_REDIS_URL": redis_url,
        "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
        "MW_NAMESPACE": namespace,
        # Tests of the runtime drive event time by hand; the watermark tests pass
        # MW_WATERMARK=authority and run the authority.
        "MW_WATERMARK": "redis",
        **extra,
    }
