"""A local Apache Kafka cluster: ``brokers`` KRaft nodes (each broker and controller),
one controller quorum, every topic replicated to three with two in sync
(``kafka_broker.CLUSTER_SETTINGS``). ``mw up --brokers 3`` and the ``cluster`` tests
run on it; ``kill(i)`` SIGKILLs one node, ``start_node(i)`` brings it back.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mwcore.tools.stack.kafka_broker import CLUSTER_SETTINGS, KAFKA_VERSION, KafkaBroker, new_cluster_id
from mwcore.tools.stack.localproc import stop_processes
from mwcore.transport.topics import broker_count


@dataclass
class KafkaCluster:
    brokers: int = 3
    directory: Path | None = None
    heap_mb: int = 512
    nodes: list[KafkaBroker] = field(default_factory=list)

    product = "Apache Kafka"
    version = KAFKA_VERSION

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def running_version(self) -> str:
        return self.nodes[0].running_version() if self.nodes else "unknown"

    def start(self, timeout: float = 90) -> KafkaCluster:
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="mw-kafka-cluster-"))
        if not self.nodes:
            cluster_id = new_cluster_id()
            settings = dict(CLUSTER_SETTINGS)
            if self.brokers < 3:  # (two: a write needs both)
                settings |= {k: str(min(int(v), self.brokers)) for k, v in CLUSTER_SETTINGS.items()}
            self.nodes = [
                KafkaBroker(
                    directory=self.directory / f"node{i + 1}",
                    heap_mb=self.heap_mb,
                    node_id=i + 1,
                    cluster_id=cluster_id,
                    extra=settings,
                )
                for i in range(self.brokers)
            ]
            for n in self.nodes:
                n.reserve_ports()
            voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
            for n in self.nodes:
                n.voters = voters
        try:
            for n in self.nodes:
                if n.proc is None:
                    n.launch(timeout)
            for n in self.nodes:
                n.wait_ready(timeout)
            # each node answers before the metadata every node serves lists them all
            deadline = time.monotonic() + timeout
            while broker_count(self.bootstrap) < len(self.nodes):
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the {len(self.nodes)} Kafka nodes did not all join within {timeout}s"
                    )
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, index: int) -> KafkaBroker:
        """SIGKILL one node (the others go on: every partition has replicas there)."""
        node = self.nodes[index]
        node.kill()
        return node

    def start_node(self, index: int, timeout: float = 90) -> None:
        node = self.nodes[index]
        node.launch(timeout)
        node.wait_ready(timeout)

    def stop(self, timeout: float = 20) -> None:
        """All at once: one by one, the last ones wait for a quorum that is leaving."""
        procs = [n.proc for n in self.nodes if n.proc is not None]
        for n in self.nodes:
            n.proc = None
        stop_processes(procs, timeout)
