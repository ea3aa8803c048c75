from __future__ import annotations

from pathlib import Path

import pytest

from mwcore.errors import ConfigError
from mwcore.process.settings import WorkerSettings
from mwcore.runtime.faults import Faults


def test_missing_settings_name_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("MW_BOOTSTRAP", "MW_REDIS_URL", "MW_SCHEMAS_DIR"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError) as err:
        WorkerSettings.load()
    for var in ("MW_BOOTSTRAP", "MW_REDIS_URL", "MW_SCHEMAS_DIR"):
        assert var in str(err.value)


def test_bad_values_are_explained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MW_BOOTSTRAP", "localhost")
    monkeypatch.setenv("MW_REDIS_URL", "http://x")
    monkeypatch.setenv("MW_SCHEMAS_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        WorkerSettings.load()
    assert "MW_BOOTSTRAP" in str(err.value) and "host:port" in str(err.value)
    assert "MW_REDIS_URL" in str(err.value)


def test_fault_specs() -> None:
    assert not Faults("").enabled
    assert Faults("after_commit:kill:0.5,before_commit:stop:1:once:after=3").enabled
    with pytest.raises(ConfigError, match="points"):
        Faults("nowhere:kill:1")
    with pytest.raises(ConfigError, match="unknown option"):
        Faults("after_commit:kill:1:sometimes")
