"""A local Redis Cluster for tests and ``mw up --redis-cluster``: three primaries, each
with one replica, every node a ``redis-server --cluster-enabled yes`` on free ports
(client and cluster bus) with its own directory and append-only file, joined by
``redis-cli --cluster create``.

``cluster-node-timeout`` is short (2 s) so that a test's failover (``kill`` a primary:
its replica takes over) takes seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mwcore.errors import ConfigError
from mwcore.store.cluster_probe import primary_port, settled
from mwcore.tools.stack.localproc import free_port
from mwcore.tools.stack.localstack import RedisServer

NODE_TIMEOUT_MS = 2_000


@dataclass
class LocalRedisCluster:
    primaries: int = 3
    replicas: int = 1  # per primary
    directory: Path | None = None
    appendfsync: Literal["always", "everysec", "no"] = "always"
    debug_command: bool = False  # DEBUG (SLEEP) from local clients: for tests
    nodes: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Any one node: the client finds the others (``store/client.py``)."""
        return self.nodes[0].url

    def start(self, timeout: float = 60) -> LocalRedisCluster:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise ConfigError("redis-cli is not installed (apt-get install redis-tools)")
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="mw-redis-cluster-"))
        try:
            for i in range(self.primaries * (1 + self.replicas)):
                node = RedisServer(
                    directory=self.directory / f"node{i}",
                    appendfsync=self.appendfsync,
                    extra=(
                        "--cluster-enabled", "yes",
                        "--cluster-port", str(free_port()),
                        "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                        *(("--enable-debug-command", "local") if self.debug_command else ()),
                    ),
                )  # fmt: skip
                self.nodes.append(node.start(timeout))
            addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
            subprocess.run(
                [
                    cli,
                    "--cluster",
                    "create",
                    *addresses,
                    "--cluster-replicas",
                    str(self.replicas),
                    "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=timeout,
            )
            self.wait_ok(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, timeout: float = 60) -> None:
        """Until every running node says the cluster is ok and sees every slot served,
        every running replica is in sync with its primary, and each knows the others."""
        deadline = time.monotonic() + timeout
        alive = [n for n in self.nodes if n.proc is not None]
        while not all(settled(n.port, len(alive)) for n in alive):
            if time.monotonic() > deadline:
                raise TimeoutError("the Redis Cluster did not settle")
            time.sleep(0.1)

    def primary_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot now."""
        asked = next(n for n in self.nodes if n.proc is not None)
        port = primary_port(asked.port, key)
        return next(n for n in self.nodes if n.port == port)

    def restore(self, timeout: float = 60) -> None:
        """Start every node that is down (a former primary comes back as a replica),
        then wait until the cluster settles."""
        for node in self.nodes:
            if node.proc is None:
                node.start(timeout)
        self.wait_ok(timeout)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
