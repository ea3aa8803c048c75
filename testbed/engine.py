"""The Docker engine and Compose v2 that ``make images`` and the compose tests use: an
engine that answers, else ``dockerd`` started here (Debian's ``docker.io``, installed if
missing; storage ``overlay2``, else ``vfs``), and the ``docker compose`` plugin (built
from the Go module proxy if missing). Each step prints one line; what cannot be done
here is ``Refused``, with what to install."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mwcore" / "images"
COMPOSE_MODULE = "github.com/docker/compose/v2"
COMPOSE_VERSION = "v2.40.3"


class Refused(Exception):
    """A step cannot be done here: the message says what to install or do."""


def say(msg: str) -> None:
    print(f"images: {msg}", flush=True)


def run(cmd: Sequence[str], *, quiet: bool = True, env: dict[str, str] | None = None) -> str:
    """Run ``cmd``; its output if it succeeds, else ``Refused`` with its last lines."""
    proc = subprocess.run(
        list(cmd), capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise Refused(f"{' '.join(cmd[:3])} failed ({proc.returncode}):\n{tail}")
    if not quiet:
        print(proc.stdout, end="")
    return proc.stdout


def apt_install(*packages: str) -> None:
    if os.geteuid() != 0:
        raise Refused(f"install {' '.join(packages)} (apt-get install {' '.join(packages)}): needs root")
    say(f"installing {' '.join(packages)} from Debian's packages")
    run(["apt-get", "update", "-qq"])
    run(["apt-get", "install", "-y", "-qq", *packages], env={"DEBIAN_FRONTEND": "noninteractive"})


def engine_answers() -> bool:
    return (
        shutil.which("docker") is not None
        and subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0
    )


def start_engine(log_dir: Path = CACHE) -> subprocess.Popen[bytes] | None:
    """Start ``dockerd`` unless an engine answers; the process started, or None.

    Storage ``overlay2`` where the kernel mounts overlays (a container shares its image's
    layers), else ``vfs`` (a full copy of the image per layer and per container: a
    three-broker project then takes some 10 GB). Without iptables (refused in some
    sandboxes) it starts again with ``--iptables=false``."""
    if engine_answers():
        return None
    if shutil.which("dockerd") is None:
        apt_install("docker.io")
    log_dir.mkdir(parents=True, exist_ok=True)
    for driver, extra in itertools.product(("overlay2", "vfs"), ([], ["--iptables=false"])):
        log = open(log_dir / "dockerd.log", "ab")  # noqa: SIM115 - the daemon holds it
        proc = subprocess.Popen(
            ["dockerd", "--storage-driver", driver, *extra],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if engine_answers():
                say(f"started dockerd (pid {proc.pid}, storage {driver}{', no iptables' if extra else ''})")
                return proc
            time.sleep(0.5)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
    raise Refused(f"dockerd did not start: see {log_dir / 'dockerd.log'}")


def compose_plugin() -> None:
    """``docker compose`` (v2): there, or built from the Go module proxy into the Docker
    CLI's plugin folder."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode == 0:
        return
    plugins = Path.home() / ".docker" / "cli-plugins"
    binary = CACHE / f"docker-compose-{COMPOSE_VERSION}"
    if not binary.exists():
        go = shutil.which("go")
        if go is None:
            raise Refused("Compose v2 is missing: install Docker's compose plugin, or Go to build it here")
        say(f"building Compose {COMPOSE_VERSION} from the Go module proxy (the first time: a few minutes)")
        info = run([go, "mod", "download", "-json", f"{COMPOSE_MODULE}@{COMPOSE_VERSION}"])
        src_dir = Path(_json_field(info, "Dir"))
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "compose"
            shutil.copytree(src_dir, src)
            for p in src.rglob("*"):
                p.chmod(p.stat().st_mode | 0o200)
            ldflags = f"-s -w -X {COMPOSE_MODULE}/internal.Version={COMPOSE_VERSION}"
            proc = subprocess.run(
                [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(binary), "./cmd"],
                cwd=src,
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise Refused(f"building Compose failed:\n{proc.stderr[-2000:]}")
    plugins.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, plugins / "docker-compose")
    say(f"docker compose {COMPOSE_VERSION}: {plugins / 'docker-compose'}")


def _json_field(raw: str, name: str) -> str:
    value = json.loads(raw)[name]
    assert isinstance(value, str)
    return value
