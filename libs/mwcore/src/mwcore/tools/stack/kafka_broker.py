"""The embedded Apache Kafka broker: its jars, fetched once, and one KRaft node.

The broker is the official ``org.apache.kafka:kafka_2.13`` artifact and what it
depends on, resolved with Maven (``fetch``, run by ``make bootstrap``) into a cache
outside the repository (``$MW_KAFKA_HOME``, default ``~/.cache/mwcore/kafka-<version>``).
``KafkaBroker`` formats a KRaft storage directory and starts one node that is broker
and controller at once, on free ports, with its data and its log in a directory of
its own.

``GUARANTEE_SETTINGS`` are the broker settings the kit's guarantees rest on;
docker-compose.yml sets the same ones (``tests/test_compose.py`` checks that, and
that its ``apache/kafka`` image is ``KAFKA_VERSION``).
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mwcore.errors import ConfigError
from mwcore.process.settings import StackSettings
from mwcore.tools.stack.localproc import die_with_parent, free_port, kill_process, stop_process
from mwcore.transport.topics import broker_ready

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.24.3"  # the version kafka_2.13 depends on; routes the broker's SLF4J logs to a file

# What the guarantees rest on, the same in docker-compose.yml: topics exist only when
# the kit creates them (with its partition counts, so keys map to the intervals it
# expects), and a single node keeps its internal topics at replication factor 1.
GUARANTEE_SETTINGS: dict[str, str] = {
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # Takeover: the kit's consumers use a 1.5 s session timeout (a dead worker's
    # intervals move on within 3 s); Kafka refuses one below this bound.
    "group.min.session.timeout.ms": "1000",
}

# A cluster of three (``mw up --brokers 3``, ``tools/stack/kafka_cluster.py``): every topic,
# the kit's streams and the internal ones, has three replicas, and a write counts once
# two have it (the kit's producers use acks=all), so one broker can die at any moment.
CLUSTER_SETTINGS: dict[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}

# What makes it fit a laptop and a test run; none of it changes what the kit promises.
LOCAL_SETTINGS: dict[str, str] = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "10",  # created on the first group join: 50 takes seconds
    "num.network.threads": "2",
    "num.io.threads": "4",
    "log.retention.ms": "-1",  # the data directory is temporary; archive tests use old timestamps
    "log.cleaner.backoff.ms": "1000",  # compacted topics are cleaned within seconds
    "log.segment.delete.delay.ms": "1000",
}

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.mwcore</groupId>
  <artifactId>embedded-kafka</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def kafka_home() -> Path:
    """Where the broker's jars are cached (outside the repository, shared by clones):
    ``MW_KAFKA_HOME``, else under ``XDG_CACHE_HOME`` (else ``~/.cache``)."""
    env = StackSettings.load()
    if env.kafka_home is not None:
        return env.kafka_home
    cache = env.xdg_cache_home or Path.home() / ".cache"
    return cache / "mwcore" / f"kafka-{KAFKA_VERSION}"


def _libs(home: Path) -> Path:
    return home / "libs"


def fetched(home: Path | None = None) -> bool:
    home = home or kafka_home()
    jar = _libs(home) / f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar"
    return (home / ".complete").exists() and jar.exists()


def fetch(home: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """Resolve the broker's jars with Maven into ``home``; a second call returns at once."""
    home = home or kafka_home()
    if fetched(home):
        return home
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError("Maven is not installed (apt-get install maven): it fetches the Kafka broker")
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(_POM.format(scala=SCALA_VERSION, kafka=KAFKA_VERSION, log4j=LOG4J_VERSION))
    staging = home / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    say(f"Apache Kafka {KAFKA_VERSION}: resolving kafka_{SCALA_VERSION} and its dependencies with Maven")
    cmd = [mvn, "-B", "-f", str(home / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    files, kib, last_said = 0, 0.0, time.monotonic()
    tail: list[str] = []
    for line in proc.stdout:
        tail = [*tail[-30:], line.rstrip()]
        m = re.search(r"Downloaded from \S+: \S+ \(([\d.]+) ([kM])B", line)
        if m:
            files += 1
            kib += float(m.group(1)) * (1024 if m.group(2) == "M" else 1)
            if time.monotonic() - last_said >= 2:
                say(f"  downloaded {files} files, {kib / 1024:.1f} MiB")
                last_said = time.monotonic()
    if proc.wait() != 0:
        raise ConfigError("Maven could not fetch the Kafka broker:\n" + "\n".join(tail))
    shutil.rmtree(_libs(home), ignore_errors=True)
    staging.rename(_libs(home))
    (home / ".complete").write_text(KAFKA_VERSION + "\n")
    jars = list(_libs(home).glob("*.jar"))
    size = sum(j.stat().st_size for j in jars) / 2**20
    say(f"Apache Kafka {KAFKA_VERSION}: {len(jars)} jars ({size:.0f} MiB) in {_libs(home)}")
    return home


def _classpath(home: Path) -> str:
    if not fetched(home):
        raise ConfigError(
            f"the Apache Kafka {KAFKA_VERSION} broker is not fetched yet: run `make bootstrap` "
            f"(or `python -m mwcore.tools.stack.kafka_broker fetch`; it needs Maven)"
        )
    return str(_libs(home) / "*")


def _java() -> str:
    home = StackSettings.load().java_home
    java = (home and shutil.which("java", path=str(home / "bin"))) or shutil.which("java")
    if java is None:
        raise ConfigError("the Kafka broker needs Java 17+: apt-get install openjdk-17-jre-headless")
    return java


@dataclass
class KafkaBroker:
    """One Apache Kafka node in KRaft mode (broker and controller), on free ports; alone,
    or one of a cluster (``voters``: every node's ``id@host:controller port``)."""

    port: int = 0
    controller_port: int = 0
    directory: Path | None = None
    heap_mb: int = 512
    home: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    node_id: int = 1
    voters: str = ""  # the controller quorum; empty: this node alone
    cluster_id: str = ""  # the cluster's id (formatted with it); empty: a new one
    extra: dict[str, str] = field(default_factory=dict)  # more (or other) broker settings
    format_args: tuple[str, ...] = ()  # more storage format arguments (--add-scram ...)
    # Listeners of their own for clients that reach the broker through a proxy (the
    # fault suite's network faults): name -> the port its clients dial (the proxy's),
    # which the listener advertises. A Kafka client connects to the addresses the
    # broker advertises on the listener it asked, so each proxied client needs one.
    proxied: dict[str, int] = field(default_factory=dict)
    proxied_ports: dict[str, int] = field(default_factory=dict)  # name -> where it listens

    product = "Apache Kafka"
    version = KAFKA_VERSION

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        assert self.directory is not None
        return self.directory / "server.log"

    def running_version(self) -> str:
        """The version the started broker logged (``Kafka version: ...``)."""
        if self.directory is not None and self.log.exists():
            m = re.search(r"Kafka version: (\S+)", self.log.read_text(errors="replace"))
            if m:
                return m.group(1)
        return "unknown"

    def properties(self) -> dict[str, str]:
        assert self.directory is not None
        listen = [f"PLAINTEXT://127.0.0.1:{self.port}", f"CONTROLLER://127.0.0.1:{self.controller_port}"]
        advertised = [f"PLAINTEXT://127.0.0.1:{self.port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        for name, dialled in self.proxied.items():
            listen.append(f"{name}://127.0.0.1:{self.proxied_ports[name]}")
            advertised.append(f"{name}://127.0.0.1:{dialled}")
            protocols.append(f"{name}:PLAINTEXT")
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters or f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "listeners": ",".join(listen),
            "advertised.listeners": ",".join(advertised),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": ",".join(protocols),
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            **GUARANTEE_SETTINGS,
            **LOCAL_SETTINGS,
            **self.extra,
        }

    def start(self, timeout: float = 60) -> KafkaBroker:
        self.launch(timeout)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def reserve_ports(self) -> None:
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        for name in self.proxied:
            self.proxied_ports[name] = self.proxied_ports.get(name) or free_port()

    def launch(self, timeout: float = 60) -> None:
        """Format the storage (the first time) and start the process, without waiting
        for it (a cluster's nodes wait for each other's quorum)."""
        home = self.home or kafka_home()
        classpath = _classpath(home)
        java = _java()
        self.reserve_ports()
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="mw-kafka-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.directory / "log4j2.properties").write_text(_LOG4J2)
        jvm = [
            java, f"-Xmx{self.heap_mb}m", f"-Xms{min(self.heap_mb, 256)}m", "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
            # C1 only: C2's compiles took more than a core for the broker's first ~20 s
            # under load here, competing with the workers of a short run.
            "-XX:TieredStopAtLevel=1", f"-Dkafka.logs.dir={self.directory}",
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}", "-cp", classpath,
        ]  # fmt: skip
        if not (self.directory / "data" / "meta.properties").exists():
            cluster = self.cluster_id or new_cluster_id()
            fmt = subprocess.run(
                # "--cluster-id=": a random id may start with "-", which the tool would
                # take for an option (1 start in 64 failed)
                [
                    *jvm,
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={cluster}",
                    "-c",
                    str(config),
                    *self.format_args,
                ],
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            if fmt.returncode != 0:
                raise RuntimeError(f"kafka storage format failed: {fmt.stdout}{fmt.stderr}")
        out = open(self.directory / "stdout.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [*jvm, "kafka.Kafka", str(config)], stdout=out, stderr=out, preexec_fn=die_with_parent
        )
        out.close()

    def wait_ready(self, timeout: float) -> None:
        """Ready when the broker answers metadata and a group coordinator exists."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not broker_ready(self.bootstrap):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the Kafka broker exited with code {self.proc.returncode} at start (log: {self.log})"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Kafka broker did not answer within {timeout}s (log: {self.log})")
            time.sleep(0.1)

    def stop(self, timeout: float = 20) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc, timeout)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        kill_process(proc)


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["fetch"]:
        print("usage: python -m mwcore.tools.stack.kafka_broker fetch", file=sys.stderr)
        return 2
    try:
        fetch(say=lambda line: print(f"bootstrap: {line}", flush=True))
    except ConfigError as exc:
        print(f"bootstrap: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
