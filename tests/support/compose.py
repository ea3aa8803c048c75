"""Checks of docker-compose.yml that need no Docker engine.

``problems(root, doc)`` lists what is wrong with a loaded compose document: it must
satisfy the Compose specification; every service built from this repository must run
``python -m <module>`` of a module that exists here (and, for a worker, a computation
class that loads); each such service's settings must load from the environment the
file gives it; its health check must probe its metrics port; every service directory
must have a compose service; the Dockerfile must ship what the commands need; and the
``kafka`` service must run the embedded broker's Apache Kafka version with the broker
settings the guarantees rest on (``mwcore.tools.stack.kafka_broker``).
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from compose_spec import PyCompose

from mwcore.errors import ConfigError
from mwcore.process.settings import AuthoritySettings, WorkerSettings
from mwcore.tools.stack.kafka_broker import CLUSTER_SETTINGS, GUARANTEE_SETTINGS, KAFKA_VERSION
from services.injector.settings import InjectorSettings
from services.model_trainer.settings import TrainerSettings

IMAGE_ROOT = "/app"  # where the Dockerfile puts the repository
DATA_ROOT = "/data"  # the volume of query logs
SETTINGS: dict[str, type[Any]] = {
    "services.watermark_authority": AuthoritySettings,
    "services.injector run": InjectorSettings,
    "services.model_trainer": TrainerSettings,
}
COMPUTATION = re.compile(r"""["']((?:services|mwcore)(?:\.\w+)+:\w+)["']""")


_VARIABLE = re.compile(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}")
SECRETS = Path(__file__).resolve().parents[2] / "compose" / "secrets.env.example"


class MissingVariable(ValueError):
    """A ``${VAR:?message}`` the environment does not set: compose refuses to start."""


def load(path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The compose file as Compose reads it with ``env`` (from ``.env`` or an
    ``--env-file``; default: the example secrets file's, so the required secrets are
    set and every ``${VAR:-default}`` takes its default); ``MissingVariable`` for a
    required variable that is not set."""
    given = env_file(SECRETS) if env is None else env

    def value(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        if name in given:
            return given[name]
        if op == ":?":
            raise MissingVariable(f"{name}: {arg or 'required'}")
        return arg

    text = _VARIABLE.sub(value, path.read_text())
    doc: dict[str, Any] = yaml.safe_load(text)  # resolves anchors and merge keys
    return doc


def env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines (``#`` comments), as ``docker compose --env-file`` reads them."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def active(services: dict[str, Any], profiles: tuple[str, ...]) -> dict[str, Any]:
    """The services ``docker compose up`` starts with these profiles on."""
    return {n: s for n, s in services.items() if not s.get("profiles") or set(s["profiles"]) & set(profiles)}


def _environment(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


@contextmanager
def _environ(env: dict[str, str]) -> Any:
    saved = dict(os.environ)
    try:
        for k in [k for k in os.environ if k.startswith("MW_")]:
            del os.environ[k]
        os.environ.update(env)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _ours(svc: dict[str, Any]) -> bool:
    return "build" in svc or str(svc.get("image", "")).startswith("mwcore/")


def _check_command(root: Path, name: str, svc: dict[str, Any], data: Path) -> list[str]:
    cmd = svc.get("command")
    if isinstance(cmd, str):
        cmd = cmd.split()
    if not cmd or cmd[:2] != ["python", "-m"] or len(cmd) < 3:
        return [f"{name}: command must be a list starting python -m <module> (is {cmd!r})"]
    module, args = cmd[2], cmd[3:]
    main = root.joinpath(*module.split(".")) / "__main__.py"
    if not main.is_file():
        return [f"{name}: command runs {module}, but {main.relative_to(root)} does not exist"]
    out = []
    from mwcore.api.computation import load_computation

    for target in COMPUTATION.findall(main.read_text()):
        try:
            load_computation(target)
        except Exception as exc:
            out.append(f"{name}: {module} runs {target}, which does not load: {exc}")
    if module == "services.injector":
        from services.injector.__main__ import build_parser

        try:
            parsed = build_parser().parse_args(args)
        except SystemExit:
            return [*out, f"{name}: `{' '.join(cmd)}`: arguments the injector does not accept"]
        if parsed.command == "generate":
            return out
        module = "services.injector run"
    settings = SETTINGS.get(module, WorkerSettings)
    env = {
        k: v.replace(IMAGE_ROOT, str(root), 1).replace(DATA_ROOT, str(data), 1)
        for k, v in _environment(svc).items()
    }
    with _environ(env):
        try:
            loaded = settings.load()
        except ConfigError as exc:
            return [*out, f"{name}: {exc}"]
    health = svc.get("healthcheck") or {}
    if not health.get("disable"):
        probe = " ".join(health.get("test") or [])
        if f":{loaded.metrics_port}/healthz" not in probe:
            out.append(f"{name}: health check does not probe /healthz on MW_METRICS_PORT ({probe!r})")
    return out


def kafka_env_name(setting: str) -> str:
    """The apache/kafka image's environment variable for a broker setting."""
    return "KAFKA_" + setting.upper().replace(".", "_")


def _check_kafka(services: dict[str, Any], profiles: tuple[str, ...] = ()) -> list[str]:
    """The brokers that run: the embedded broker's version and guarantee settings; more
    than one: a quorum of all of them, three replicas with two in sync (what
    ``mw up --brokers 3`` runs), and every service of ours told of every broker."""
    if "kafka" not in services:
        return ["no kafka service"]
    running = active(services, profiles)
    brokers = {n: s for n, s in running.items() if str(s.get("image", "")).startswith("apache/kafka")}
    expected = dict(GUARANTEE_SETTINGS)
    if len(brokers) > 1:
        expected |= CLUSTER_SETTINGS
    out = []
    for name, broker in sorted(brokers.items()):
        image = str(broker.get("image", ""))
        if image != f"apache/kafka:{KAFKA_VERSION}":
            out.append(f"{name}: image {image!r} is not the embedded broker's apache/kafka:{KAFKA_VERSION}")
        env = _environment(broker)
        for setting, value in expected.items():
            key = kafka_env_name(setting)
            if env.get(key) != value:
                out.append(f"{name}: {key} is {env.get(key)!r}, the embedded broker runs {setting}={value}")
        voters = env.get("KAFKA_CONTROLLER_QUORUM_VOTERS", "").split(",")
        if len(voters) != len(brokers):
            out.append(f"{name}: {len(voters)} controller quorum voter(s) for {len(brokers)} brokers")
    ids = [_environment(b).get("KAFKA_NODE_ID") for b in brokers.values()]
    if len(set(ids)) != len(ids):
        out.append(f"brokers share node ids: {ids}")
    for name, svc in running.items():
        bootstrap = _environment(svc).get("MW_BOOTSTRAP")
        if bootstrap is not None and {a.split(":")[0] for a in bootstrap.split(",")} != set(brokers):
            out.append(f"{name}: MW_BOOTSTRAP={bootstrap} does not name every broker ({sorted(brokers)})")
    return out


def _check_closed(services: dict[str, Any]) -> list[str]:
    """Closed by default: every published port on 127.0.0.1, Redis with a password that
    the services' URL carries, and the services given the pipeline secret."""
    out = []
    for name, svc in services.items():
        for port in svc.get("ports") or []:
            if not str(port).startswith("127.0.0.1:"):
                out.append(f"{name}: port {port!r} is published on every interface, not 127.0.0.1")
    redis = services.get("redis") or {}
    cmd = redis.get("command") or []
    password = cmd[cmd.index("--requirepass") + 1] if "--requirepass" in cmd[:-1] else None
    if not password:
        out.append("redis: runs without --requirepass (anyone who reaches it can write checkpoints)")
    for name, svc in services.items():
        env = _environment(svc)
        url = env.get("MW_REDIS_URL")
        if url is not None and (password is None or f":{password}@" not in url):
            out.append(f"{name}: MW_REDIS_URL does not carry Redis's password")
        if url is not None and not env.get("MW_ID_SECRET"):
            out.append(f"{name}: no MW_ID_SECRET (record ids unsigned)")
    return out


def _named_volumes(svc: dict[str, Any]) -> list[str]:
    """The named volumes a service mounts (short or long syntax; not bind mounts)."""
    out = []
    for vol in svc.get("volumes") or []:
        source = str(vol.get("source", "")) if isinstance(vol, dict) else str(vol).split(":", 1)[0]
        if source and not source.startswith((".", "/")):
            out.append(source)
    return out


def _check_shared_volumes(services: dict[str, Any]) -> list[str]:
    """Services mounting one named volume must be ordered by ``depends_on``: the first
    container to mount a new volume fills it from its image, and two created at once race
    at that copy (``failed to mkdir ...: file exists``)."""
    users: dict[str, list[str]] = {}
    for name, svc in services.items():
        for source in _named_volumes(svc):
            users.setdefault(source, []).append(name)

    def after(name: str, other: str, seen: frozenset[str] = frozenset()) -> bool:
        deps = services[name].get("depends_on") or []
        return other in deps or any(
            after(d, other, seen | {name}) for d in deps if d in services and d not in seen
        )

    out = []
    for source, names in sorted(users.items()):
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if not (after(a, b) or after(b, a)):
                    out.append(
                        f"{a} and {b} share volume {source!r} but may be created at once"
                        " (order them by depends_on)"
                    )
    return out


def problems(
    root: Path, doc: dict[str, Any], data: Path, dockerfile: str | None = None, profiles: tuple[str, ...] = ()
) -> list[str]:
    """What is wrong with ``doc`` (a loaded compose file of the repository at ``root``);
    ``data`` stands in for the query-log volume; ``dockerfile`` for the Dockerfile's text
    (default: the repository's)."""
    out = []
    try:
        PyCompose.from_json(json.dumps(doc))
    except ValueError as exc:
        out.append(f"not a valid compose file: {exc}")
    services: dict[str, Any] = doc.get("services") or {}
    volumes = set(doc.get("volumes") or {})
    modules = set()
    for name, svc in services.items():
        for dep in svc.get("depends_on") or []:
            if dep not in services:
                out.append(f"{name}: depends on {dep!r}, which is not a service")
        for source in _named_volumes(svc):
            if source not in volumes:
                out.append(f"{name}: volume {source!r} is not declared")
        if _ours(svc):
            cmd = svc.get("command") or []
            if len(cmd) >= 3:
                modules.add(cmd[2])
            out += _check_command(root, name, svc, data)
    for main in sorted(root.glob("services/*/__main__.py")):
        module = f"services.{main.parent.name}"
        if module not in modules:
            out.append(f"{module} has no service in the compose file")
    out += _check_kafka(services, profiles)
    out += _check_closed(services)
    out += _check_shared_volumes(services)
    if dockerfile is None:
        dockerfile = (root / "Dockerfile").read_text() if (root / "Dockerfile").exists() else ""
    for needed in ("COPY build/wheels", "COPY schemas", "COPY services", f"PYTHONPATH={IMAGE_ROOT}"):
        if needed not in dockerfile:
            out.append(f"Dockerfile: missing {needed!r}")
    return out
