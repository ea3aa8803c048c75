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
from tests.support.compose import load, problems

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
        (lambda s: s["windower"]["environment"].pop("MW_BOOTSTRAP"), "windower: invalid configuration"),
        (lambda s: s["injector"]["environment"].pop("MW_INJECTOR_DIR"), "MW_INJECTOR_DIR"),
        (lambda s: s["dip_detector"].update(command=["python", "-m", "services.nothing"]), "does not exist"),
        (lambda s: s["windower"].update(restart="sometimes"), "not a valid compose file"),
        (lambda s: s.pop("dip_detector"), "services.dip_detector has no service"),
        (lambda s: s["windower"]["healthcheck"].update(test=["CMD", "true"]), "health check"),
        (lambda s: s["generator"].update(command=["python", "-m", "services.injector", "gen"]), "arguments"),
        (lambda s: s["injector"].update(volumes=["logs:/data"]), "volume 'logs' is not declared"),
    ],
)
def test_each_check_catches_a_broken_file(
    doc: dict[str, Any], tmp_path: Path, change: Any, expected: str
) -> None:
    found = problems(ROOT, _broken(doc, change), tmp_path)
    assert any(expected in p for p in found), found
