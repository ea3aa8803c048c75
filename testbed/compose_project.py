"""A project of ``docker-compose.yml`` on a real Docker engine, for the ``compose`` tests.

``engine`` starts ``dockerd`` if none answers (and stops what it started) and builds the
images with ``make images`` (``testbed/images.py``: reused when cached). A
``ComposeProject`` is one ``docker compose -p <name>`` project with its own secrets,
host ports and the local images; ``probe`` reads what the pipeline wrote from inside
the project's network (``compose_probe.py``); ``exact_counts`` compares the windows
with the query logs the generator wrote.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mwcore.tools.stack.localproc import free_port
from services.injector.logs import nominal_second
from services.injector.scenario import Scenario
from services.injector.truth import recount
from testbed import images
from testbed.engine import start_engine
from testbed.images import ROOT

PROBE = Path(__file__).with_name("compose_probe.py")
LABEL = "com.docker.compose.project"


@contextmanager
def engine(log: Path) -> Iterator[None]:
    """A Docker engine with the images built; stops the engine if it started one."""
    started = start_engine(log.parent)
    try:
        with log.open("w") as out:
            done = subprocess.run(
                [sys.executable, "-m", "testbed.images"],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=1800,
            )
        assert done.returncode == 0, log.read_text()[-3000:]
        yield
    finally:
        if started is not None:
            started.terminate()
            started.wait(60)


@dataclass
class ComposeProject:
    workdir: Path
    extra_env_files: tuple[Path, ...] = ()
    name: str = field(default_factory=lambda: f"mwtest{uuid.uuid4().hex[:8]}")
    kafka_port: int = field(default_factory=free_port)
    redis_port: int = field(default_factory=free_port)
    registry_port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.env_file = self.workdir / "compose.env"
        self.env_file.write_text(
            f"ZG_REDIS_PASSWORD={secrets.token_urlsafe(24)}\nZG_ID_SECRET={secrets.token_urlsafe(32)}\n"
            f"ZG_KAFKA_HOST_PORT={self.kafka_port}\nZG_REDIS_HOST_PORT={self.redis_port}\n"
            f"ZG_PYTHON_IMAGE={images.PYTHON}\nZG_REDIS_IMAGE={images.REDIS}\nZG_KAFKA_IMAGE={images.KAFKA}\n"
            f"ZG_REGISTRY_IMAGE={images.REGISTRY}\nZG_REGISTRY_HOST_PORT={self.registry_port}\n"
        )

    def compose(
        self, *args: str, timeout: float = 300, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        files = [a for f in (self.env_file, *self.extra_env_files) for a in ("--env-file", str(f))]
        cmd = ["docker", "compose", "-p", self.name, "-f", str(ROOT / "docker-compose.yml"), *files, *args]
        done = subprocess.run(cmd, cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            tail = f"{done.stdout[-2000:]}{done.stderr[-3000:]}"
            raise AssertionError(f"docker compose {' '.join(args)}: exit {done.returncode}\n{tail}")
        return done

    def up(self, *services: str, timeout: float = 300) -> None:
        """``up -d`` (of ``services``, or all), then wait until every service runs, healthy
        where it has a health check. (``up --wait`` refuses a service whose health check
        is disabled, as the generator's is.)"""
        self.compose("up", "-d", *services, timeout=timeout)
        deadline = time.monotonic() + timeout
        while bad := self.unhealthy():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not healthy after {timeout} s: {bad}")
            time.sleep(2)

    def services(self) -> list[dict[str, Any]]:
        out = self.compose("ps", "--all", "--format", "json").stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def unhealthy(self) -> list[str]:
        """Services not running, or running with a health check that does not pass."""
        bad = []
        for s in self.services():
            if s["State"] != "running" or s.get("Health") not in ("", "healthy"):
                bad.append(f"{s['Service']}: {s['State']} {s.get('Health', '')}".strip())
        return bad

    def probe(self, watermarks_only: bool = False) -> dict[str, Any]:
        """What the pipeline wrote (``compose_probe.py``, run in the authority's container):
        the watermarks, and unless ``watermarks_only`` the windows and anomalies."""
        args = ["watermarks"] if watermarks_only else []
        done = self.compose(
            "exec", "-T", "watermark_authority", "python", "-", *args, stdin=PROBE.read_text()
        )
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    def wait_watermark(self, name: str, at_least: int, timeout: float) -> None:
        """Poll the watermarks (only: cheap) until ``name``'s output watermark is at least
        ``at_least``. A probe that fails (it reads the topic to its end, which a cluster
        still electing leaders may not allow in its minute) is tried again until then."""
        start = time.monotonic()
        seen: list[str] = []  # at each poll, s after the start: ms short of the mark (for a failure)
        wm = -(2**63)
        while True:
            try:
                wm = self.probe(watermarks_only=True)["watermarks"].get(name, {}).get("output", -(2**63))
            except AssertionError as exc:  # the probe could not read the topic (a broker still starting)
                seen.append(f"{time.monotonic() - start:.0f}s: probe failed: {str(exc).splitlines()[-1]}")
            else:
                if wm >= at_least:
                    return
                seen.append(f"{time.monotonic() - start:.0f}s: {at_least - wm}")
            if time.monotonic() > start + timeout:
                raise TimeoutError(
                    f"{name}'s output watermark is {wm}, not {at_least}, after {timeout} s "
                    f"(ms short of it, as polled: {', '.join(seen[-20:])})"
                )
            time.sleep(3)

    def wait_output(self, name: str, at_least: int, timeout: float) -> dict[str, Any]:
        """``wait_watermark``, then the whole probe: the windows and anomalies, read after
        the watermark passed ``at_least``."""
        self.wait_watermark(name, at_least, timeout)
        return self.probe()

    def logs_dir(self) -> Path:
        """The generator's query logs and truth, copied out of its volume."""
        dest = self.workdir / f"querylogs-{time.monotonic_ns()}"
        self.compose("cp", "generator:/data/querylogs", str(dest))
        return dest

    def first_second(self) -> int:
        """The event time of the generator's first second (ms)."""
        seconds = [s for p in self.logs_dir().iterdir() if (s := nominal_second(p)) is not None]
        assert seconds, "no query logs yet"
        return min(seconds)

    def leftovers(self) -> list[str]:
        """Containers, networks and volumes of this project still there."""
        out = []
        for kind in ("ps -a", "network ls", "volume ls"):
            listed = subprocess.run(
                ["docker", *kind.split(), "-q", "--filter", f"label={LABEL}={self.name}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            out += [f"{kind.split()[0]} {x}" for x in listed]
        return out

    def save_logs(self) -> None:
        done = self.compose("logs", "--no-color", "--timestamps", check=False, timeout=120)
        (self.workdir / "compose.log").write_text(done.stdout + done.stderr)

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "--timeout", "10", timeout=300)


@contextmanager
def project(workdir: Path, *extra_env: Path) -> Iterator[ComposeProject]:
    """A project up (healthy), its logs saved beside its files and taken down after."""
    p = ComposeProject(workdir, extra_env)
    try:
        p.up()
        yield p
    finally:
        p.save_logs()  # compose.log beside the project's files
        p.down()


def output_watermark(got: dict[str, Any], name: str) -> int:
    return int(got["watermarks"][name]["output"])


def running_from(p: ComposeProject, seconds: int) -> int:
    """Event time ``seconds`` into the run, once the windower has passed it."""
    at = p.first_second() + seconds * 1000
    p.wait_watermark("windower", at, 240)
    return at


def broker_killed_and_back(p: ComposeProject, broker: str = "kafka-2", down_s: float = 10.0) -> list[str]:
    """On the ``three-brokers`` profile: ``broker`` killed 15 s into the run, brought back
    ``down_s`` later; what is wrong with the windows 25 s past the kill (empty: none
    lost, none twice)."""
    services = {s["Service"] for s in p.services()}
    if not services >= {"kafka", "kafka-2", "kafka-3"}:
        return [f"not the three-brokers profile: {sorted(services)}"]
    at = running_from(p, 15)
    p.compose("kill", broker)
    time.sleep(down_s)
    p.up(broker)
    got = p.wait_output("windower", at + 25_000, 300)
    return exact_counts(p, got, output_watermark(got, "windower") - 1000)


def exact_counts(project: ComposeProject, got: dict[str, Any], horizon: int) -> list[str]:
    """What is wrong with the windows up to ``horizon`` (bucket starts at or before it),
    against the query logs the generator wrote."""
    want = recount(project.logs_dir(), Scenario().jitter_ms)
    return window_problems(got["window_counts"], want, horizon)


def window_problems(records: list[dict[str, Any]], logs: Counter[tuple[str, int]], horizon: int) -> list[str]:
    """The windows read (``{"id", "value"}``, a re-sent one counted once) against the
    counts of the logs, up to ``horizon``: a window missing, counted wrong, not in the
    logs, or emitted twice (two ids)."""
    by_id = {r["id"]: r["value"] for r in records}
    seen: Counter[tuple[str, int]] = Counter((v["query"], v["bucket_start"]) for v in by_id.values())
    problems = [f"window {k} emitted {n} times" for k, n in seen.items() if n > 1][:10]
    counts = {
        (v["query"], v["bucket_start"]): v["count"] for v in by_id.values() if v["bucket_start"] <= horizon
    }
    want = {k: n for k, n in logs.items() if k[1] <= horizon}
    missing = sorted(set(want) - set(counts))
    extra = sorted(set(counts) - set(want))
    wrong = sorted(k for k in set(want) & set(counts) if want[k] != counts[k])
    if missing:
        problems.append(f"{len(missing)} windows missing, e.g. {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} windows not in the logs, e.g. {extra[:3]}")
    if wrong:
        problems.append(
            f"{len(wrong)} windows counted wrong, e.g. {[(k, want[k], counts[k]) for k in wrong[:3]]}"
        )
    if not want:
        problems.append(f"no window up to {horizon} in the logs")
    return problems
