"""Many worker processes of one computation on one machine (``mw run --processes N``,
``MW_PROCESSES``).

One Python process runs one loop on one core, so a computation uses a machine's cores
by running several worker processes. Each is an ordinary worker (``run_computation``)
in a consumer group with the others: the intervals spread over them exactly as over
workers on separate machines, with the same fencing, takeover and exactly-once
delivery. This parent process only supervises them:

- each child gets its own ``MW_WORKER_ID`` (``<id>-<k>``), ``MW_INSTANCE_ID``
  (``<id>-<k>``, when static membership is on) and ``MW_METRICS_PORT`` (the port + k);
- SIGTERM or SIGINT to the parent is passed to every child (each drains and hands its
  intervals over), and the parent exits when they have;
- a child that stops on its own with exit code 2 (a configuration error, a store that
  lost checkpoints: it printed the one line why) stops the others, and the parent
  exits 2; a child that dies otherwise (a crash, SIGKILL, the OOM killer) is started
  again after ``RESTART_S``, like a supervisor would;
- every child's stderr passes through the parent (line by line), which logs a child's
  end the moment it sees it (``pool_child_died``, ``pool_child_refused``) with how it
  ended and the last line of its output that says what went wrong.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import FrameType

import structlog

from mwcore.process.exits import describe, last_error

log = structlog.get_logger("mwcore.pool")

RESTART_S = 1.0
CHILD = "MW_POOL_CHILD"  # set in the children: they run as plain workers


@dataclass
class Pool:
    computation: str  # module:Class
    processes: int
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    restarts: int = 0
    _stopping: bool = False
    _tails: dict[int, deque[str]] = field(default_factory=dict)  # child -> its last lines
    _relays: dict[int, threading.Thread] = field(default_factory=dict)

    def child_env(self, k: int) -> dict[str, str]:
        env = dict(self.env)
        base = env.get("MW_WORKER_ID") or f"{os.uname().nodename}-{os.getpid()}"
        env["MW_WORKER_ID"] = f"{base}-{k}"
        if env.get("MW_INSTANCE_ID"):
            env["MW_INSTANCE_ID"] = f"{env['MW_INSTANCE_ID']}-{k}"
        if env.get("MW_METRICS_PORT"):
            env["MW_METRICS_PORT"] = str(int(env["MW_METRICS_PORT"]) + k)
        env["MW_PROCESSES"] = "1"
        env[CHILD] = "1"
        return env

    def _spawn(self, k: int) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            [sys.executable, "-m", "mwcore", "run", self.computation],
            env=self.child_env(k),
            stderr=subprocess.PIPE,
        )
        tail = self._tails[k] = deque(maxlen=50)
        relay = self._relays[k] = threading.Thread(target=_relay, args=(child, tail), daemon=True)
        relay.start()
        return child

    def _last_error(self, k: int, child: subprocess.Popen[bytes]) -> str:
        relay = self._relays.get(k)
        if relay is not None:
            relay.join(1)  # it has read what the child wrote, to the end
        return last_error(self._tails.get(k, ()))

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self.children = [self._spawn(k) for k in range(self.processes)]
        log.info("pool_started", computation=self.computation, processes=self.processes)
        died_at: dict[int, float] = {}
        code = 0
        while not self._stopping:
            time.sleep(0.2)
            for k, child in enumerate(self.children):
                if child.poll() is None:
                    continue
                if child.returncode == 2:
                    log.error(
                        "pool_child_refused",
                        child=k,
                        computation=self.computation,
                        last_error=self._last_error(k, child),
                    )
                    code = 2
                    self._stopping = True
                    break
                now = time.monotonic()
                if k not in died_at:
                    died_at[k] = now
                    log.warning(
                        "pool_child_died",
                        child=k,
                        code=child.returncode,
                        how=describe(child.returncode),
                        last_error=self._last_error(k, child),
                    )
                elif now - died_at[k] >= RESTART_S:
                    del died_at[k]
                    self.children[k] = self._spawn(k)
                    self.restarts += 1
                    log.info("pool_child_restarted", child=k)
        self._stop_children()
        return code

    def _stop_children(self, timeout: float = 60) -> None:
        """SIGTERM them all (they drain side by side), SIGKILL any still running after
        ``timeout`` seconds."""
        running = [c for c in self.children if c.poll() is None]
        for c in running:
            c.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for c in running:
            try:
                c.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait()

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True


def _relay(child: subprocess.Popen[bytes], tail: deque[str]) -> None:
    """Copy the child's stderr to ours, keeping its last lines."""
    assert child.stderr is not None
    for raw in child.stderr:
        sys.stderr.buffer.write(raw)
        sys.stderr.buffer.flush()
        tail.append(raw.decode(errors="replace"))
