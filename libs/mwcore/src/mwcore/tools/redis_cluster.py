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
from typing import Any, Literal, cast

import redis
from redis.crc import key_slot

from mwcore.errors import ConfigError
from mwcore.tools.localproc import free_port
from mwcore.tools.localstack import RedisServer

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

    def client(self, node: RedisServer) -> redis.Redis:
        return redis.Redis(port=node.port, socket_connect_timeout=2, socket_timeout=5)

    def wait_ok(self, timeout: float = 60) -> None:
        """Until every running node says the cluster is ok and sees every slot served,
        and every running replica is in sync with its primary."""
        deadline = time.monotonic() + timeout
        while not all(self._settled(n) for n in self.nodes if n.proc is not None):
            if time.monotonic() > deadline:
                raise TimeoutError("the Redis Cluster did not settle")
            time.sleep(0.1)

    def _settled(self, node: RedisServer) -> bool:
        c = self.client(node)
        try:
            info = cluster_info(c)
            if info.get("cluster_state") != "ok" or int(info.get("cluster_slots_ok", 0)) != 16384:
                return False
            repl: Any = c.info("replication")
            if repl.get("role") != "master" and repl.get("master_link_status") != "up":
                return False
            # and it knows each primary's replicas (clients learn them from CLUSTER SLOTS)
            alive = sum(1 for n in self.nodes if n.proc is not None)
            slots: Any = cast(Any, c).execute_command("CLUSTER", "SLOTS")
            known = {tuple(node[:2]) for entry in slots for node in entry[2:]}
            return len(known) >= min(alive, self.primaries * (1 + self.replicas))
        except redis.RedisError:
            return False
        finally:
            c.close()

    def primary_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot now."""
        c = self.client(next(n for n in self.nodes if n.proc is not None))
        try:
            slot = key_slot(key.encode())
            slots: Any = cast(Any, c).execute_command("CLUSTER", "SLOTS")
            for start, end, primary, *_ in slots:
                if start <= slot <= end:
                    port = int(primary[1])
                    return next(n for n in self.nodes if n.port == port)
        finally:
            c.close()
        raise LookupError(f"no node serves {key}")

    def role(self, node: RedisServer) -> str:
        c = self.client(node)
        try:
            return str(c.info("replication")["role"])
        finally:
            c.close()

    def primaries_now(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.proc is not None and self.role(n) == "master"]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def cluster_info(client: redis.Redis) -> dict[str, str]:
    """``CLUSTER INFO`` of one node, as a dict of strings."""
    raw: Any = cast(Any, client).execute_command("CLUSTER", "INFO")
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
