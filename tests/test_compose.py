"""docker-compose.yml, checked without a Docker engine: it satisfies the Compose
specification, every service's command resolves to code in this repository, every
service's settings load from the environment the file gives it, and health checks
probe the metrics port. Each check is shown to catch a broken file."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.support.compose import SECRETS, MissingVariable, active, env_file, load, problems

pytestmark = pytest.mark.observability


@pytest.fixture
def doc() -> dict[str, Any]:
    return load(ROOT / "docker-compose.yml")


def test_the_compose_file_is_valid_and_complete(doc: dict[str, Any], tmp_path: Path) -> None:
    assert problems(ROOT, doc, tmp_path) == []
    services = doc["services"]
    assert {"kafka", "redis", "watermark_authority", "injector", "windower", "dip_detector"} <= set(services)
    assert "--appendonly" in services["redis"]["command"]
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    for name in ("watermark_authority", "injector", "windower", "dip_detector"):
        assert services[name]["restart"] == "unless-stopped"
        assert services[name]["depends_on"]["kafka"]["condition"] == "service_healthy"


def _broken(doc: dict[str, Any], change: Any) -> dict[str, Any]:
    bad = copy.deepcopy(doc)
    change(bad["services"])
    return bad


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda s: s["windower"]["environment"].pop("MW_BOOTSTRAP"),
            "windower: MW_BOOTSTRAP: Field required",
        ),
        (lambda s: s["injector"]["environment"].pop("MW_INJECTOR_DIR"), "MW_INJECTOR_DIR"),
        (lambda s: s["dip_detector"].update(command=["python", "-m", "services.nothing"]), "does not exist"),
        (lambda s: s["windower"].update(restart="sometimes"), "not a valid compose file"),
        (lambda s: s.pop("dip_detector"), "services.dip_detector has no service"),
        (lambda s: s["windower"]["healthcheck"].update(test=["CMD", "true"]), "health check"),
        (lambda s: s["generator"].update(command=["python", "-m", "services.injector", "gen"]), "arguments"),
        (lambda s: s["injector"].update(volumes=["logs:/data"]), "volume 'logs' is not declared"),
        (lambda s: s["windower"]["depends_on"].update(zookeeper={}), "depends on 'zookeeper'"),
        (lambda s: s["injector"]["depends_on"].pop("generator"), "share volume 'querylogs'"),
        (
            lambda s: s["windower"].update(command=["python", "-m", "tests.support.stale_service"]),
            "does not load",
        ),
        (lambda s: s["kafka"].update(image="apache/kafka:3.9.1"), "not the embedded broker's"),
        (lambda s: s["kafka"].update(ports=["29092:29092"]), "published on every interface"),
        (
            lambda s: s["redis"].update(command=["redis-server", "--appendonly", "yes"]),
            "without --requirepass",
        ),
        (lambda s: s["windower"]["environment"].pop("MW_ID_SECRET"), "no MW_ID_SECRET"),
        (
            lambda s: s["kafka"]["environment"].pop("KAFKA_AUTO_CREATE_TOPICS_ENABLE"),
            "auto.create.topics.enable=false",
        ),
        (
            lambda s: s["kafka"]["environment"].update(KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="3000"),
            "group.initial.rebalance.delay.ms=0",
        ),
    ],
)
def test_each_check_catches_a_broken_file(
    doc: dict[str, Any], tmp_path: Path, change: Any, expected: str
) -> None:
    found = problems(ROOT, _broken(doc, change), tmp_path)
    assert any(expected in p for p in found), found


@pytest.mark.parametrize("line", ["COPY build/wheels", "COPY schemas", "COPY services", "PYTHONPATH=/app"])
def test_the_dockerfile_check_catches_a_missing_line(doc: dict[str, Any], tmp_path: Path, line: str) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert line in dockerfile
    broken = "\n".join(x for x in dockerfile.splitlines() if line not in x)
    assert problems(ROOT, doc, tmp_path, dockerfile=broken) == [f"Dockerfile: missing {line!r}"]


def test_compose_runs_the_embedded_brokers_version_and_settings(doc: dict[str, Any]) -> None:
    from mwcore.tools.stack.kafka_broker import GUARANTEE_SETTINGS, KAFKA_VERSION
    from tests.support.compose import kafka_env_name

    kafka = doc["services"]["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    for setting, value in GUARANTEE_SETTINGS.items():
        assert str(kafka["environment"][kafka_env_name(setting)]) == value, setting


def test_the_three_broker_profile_is_a_replicated_cluster(tmp_path: Path) -> None:
    """``docker compose --env-file compose/three-brokers.env up``: three brokers in one
    quorum, each with three replicas and two in sync, every service told of all three
    (what ``mw up --brokers 3`` runs); the file's checks hold with the profile on."""
    env = env_file(SECRETS) | env_file(ROOT / "compose" / "three-brokers.env")
    doc = load(ROOT / "docker-compose.yml", env)
    profiles = tuple(env["COMPOSE_PROFILES"].split(","))
    assert problems(ROOT, doc, tmp_path, profiles=profiles) == []
    brokers = {n for n, s in active(doc["services"], profiles).items() if "kafka" in str(s.get("image"))}
    assert brokers == {"kafka", "kafka-2", "kafka-3"}
    assert (
        doc["services"]["windower"]["environment"]["MW_BOOTSTRAP"] == "kafka:9092,kafka-2:9092,kafka-3:9092"
    )
    # a session three busy brokers keep (1.5 s, the single broker's, is lost over and over)
    assert doc["services"]["windower"]["environment"]["MW_SESSION_TIMEOUT_MS"] == "6000"
    # without the env file the profile is off, and the same file is the single broker
    single = load(ROOT / "docker-compose.yml")
    assert problems(ROOT, single, tmp_path) == []
    # the check catches a cluster that is not one: a broker left out of the quorum
    broken = load(ROOT / "docker-compose.yml", env | {"ZG_KAFKA_VOTERS": "1@kafka:9093,2@kafka-2:9093"})
    found = problems(ROOT, broken, tmp_path, profiles=profiles)
    assert any("2 controller quorum voter(s) for 3 brokers" in p for p in found), found
    lonely = load(ROOT / "docker-compose.yml", env | {"ZG_KAFKA_MIN_ISR": "1"})
    found = problems(ROOT, lonely, tmp_path, profiles=profiles)
    assert any("min.insync.replicas=2" in p for p in found), found


def test_compose_refuses_to_start_without_the_secrets() -> None:
    """Closed by default: without ``.env`` (``make compose-env``) the required secrets are
    missing and compose stops with the variable's message, as ``docker compose`` does."""
    with pytest.raises(MissingVariable, match=r"ZG_REDIS_PASSWORD: set ZG_REDIS_PASSWORD in \.env"):
        load(ROOT / "docker-compose.yml", {})


def test_the_compose_tests_window_check_catches_each_kind_of_wrong_window() -> None:
    """tests/test_compose_up.py's check of the windows (no engine here): it passes the
    right windows, and names a lost one, a count off by one, one emitted twice under two
    ids, and one beyond the logs; a re-sent record (the same id) is no problem."""
    from collections import Counter

    from testbed.compose_project import window_problems

    logs = Counter({("en:a", 1000): 3, ("en:b", 1000): 1, ("en:a", 2000): 2, ("en:a", 9000): 5})

    def rec(rid: str, query: str, bucket: int, count: int) -> dict[str, Any]:
        return {"id": rid, "value": {"query": query, "bucket_start": bucket, "count": count}}

    right = [rec("1", "en:a", 1000, 3), rec("2", "en:b", 1000, 1), rec("3", "en:a", 2000, 2)]
    assert window_problems(right, logs, 2000) == []
    assert window_problems([*right, right[0]], logs, 2000) == []  # re-sent: the same id
    assert window_problems(right[1:], logs, 2000) == ["1 windows missing, e.g. [('en:a', 1000)]"]
    off = [rec("1", "en:a", 1000, 4), *right[1:]]
    assert window_problems(off, logs, 2000) == ["1 windows counted wrong, e.g. [(('en:a', 1000), 3, 4)]"]
    twice = [*right, rec("4", "en:a", 2000, 2)]
    assert window_problems(twice, logs, 2000) == ["window ('en:a', 2000) emitted 2 times"]
    extra = [*right, rec("5", "en:c", 2000, 1)]
    assert window_problems(extra, logs, 2000) == ["1 windows not in the logs, e.g. [('en:c', 2000)]"]


def test_compose_runs_the_local_stacks_schema_registry_and_every_service_uses_it(doc: dict[str, Any]) -> None:
    from mwcore.tools.stack.schema_registry import APICURIO_VERSION
    from testbed.images import REGISTRY_VERSION

    registry = doc["services"]["schema-registry"]
    assert registry["image"] == f"apicurio/apicurio-registry:{APICURIO_VERSION}"
    assert REGISTRY_VERSION == APICURIO_VERSION  # the stand-in `make images` builds
    env = registry["environment"]
    assert env["APICURIO_STORAGE_KIND"] == "sql" and "/var/lib/registry/" in env["APICURIO_DATASOURCE_URL"]
    assert "registry-data:/var/lib/registry" in registry["volumes"]  # a restart loses no schema
    for name, svc in doc["services"].items():
        if str(svc.get("image", "")).startswith("mwcore/") and name not in ("generator", "model_trainer"):
            url = svc["environment"]["MW_SCHEMA_REGISTRY_URL"]
            assert url == "http://schema-registry:8080/apis/ccompat/v7", name
            assert svc["depends_on"]["schema-registry"]["condition"] == "service_healthy", name
