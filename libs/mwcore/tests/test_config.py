from __future__ import annotations

from pathlib import Path

import pytest

from mwcore.errors import ConfigError
from mwcore.process.settings import WorkerSettings
from mwcore.runtime.faults import Faults


def _required_settings(monkeypatch: pytest.MonkeyPatch, schemas: Path) -> None:
    """What every process must be given, set to values that load (nothing is asked)."""
    monkeypatch.setenv("MW_BOOTSTRAP", "127.0.0.1:9092")
    monkeypatch.setenv("MW_REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("MW_SCHEMAS_DIR", str(schemas))


def _readme_row(start: str) -> str:
    """README.md's settings-table row that starts with ``start``."""
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text().splitlines()
    return next(line for line in readme if line.startswith(start))


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


def test_the_negative_controls_are_read_once_into_one_frozen_object(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import dataclasses

    from mwcore.controls import SAFE, NegativeControls

    for var in ("MW_BOOTSTRAP", "MW_REDIS_URL"):
        monkeypatch.setenv(var, "127.0.0.1:9" if var == "MW_BOOTSTRAP" else "redis://127.0.0.1:9/0")
    monkeypatch.setenv("MW_SCHEMAS_DIR", str(tmp_path))
    assert WorkerSettings.load().unsafe == SAFE and SAFE.active() == []
    monkeypatch.setenv("MW_UNSAFE_DISABLE_FENCING", "1")
    monkeypatch.setenv("mw_unsafe_ignore_backlog", "true")  # any case, as every setting
    controls = WorkerSettings.load().unsafe
    assert controls == NegativeControls(disable_fencing=True, ignore_backlog=True)
    assert controls.active() == ["MW_UNSAFE_DISABLE_FENCING", "MW_UNSAFE_IGNORE_BACKLOG"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        controls.disable_fencing = False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("MW_UNSAFE_DISABLE_FENCINGG", "1", "no such negative control"),  # a misspelt control is refused
        ("MW_UNSAFE_DISABLE_DEDUP", "maybe", "not a boolean"),
    ],
)
def test_a_negative_control_that_cannot_be_read_stops_the_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, var: str, value: str, message: str
) -> None:
    monkeypatch.setenv("MW_BOOTSTRAP", "127.0.0.1:9")
    monkeypatch.setenv("MW_REDIS_URL", "redis://127.0.0.1:9/0")
    monkeypatch.setenv("MW_SCHEMAS_DIR", str(tmp_path))
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=message) as err:
        WorkerSettings.load()
    assert var in str(err.value)


def test_a_native_core_that_is_not_installed_is_refused_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sys

    from mwcore.process.settings import WorkerSettings

    monkeypatch.setitem(sys.modules, "mwcore_native", None)  # as if never built
    _required_settings(monkeypatch, tmp_path)
    monkeypatch.setenv("MW_CORE", "native")
    with pytest.raises(
        ConfigError, match=r"MW_CORE=native: the native core is not installed.*make bootstrap"
    ):
        WorkerSettings.load()
    monkeypatch.setenv("MW_CORE", "python")
    assert WorkerSettings.load().core == "python"
    monkeypatch.delenv("MW_CORE")
    assert WorkerSettings.load().core == "python"  # unset, and not installed: the reference


def test_the_native_core_is_the_default_where_it_is_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import shutil

    from mwcore.process.settings import WorkerSettings

    if shutil.which("cargo") is None:
        pytest.skip("no Rust toolchain: the native core is not built here")
    _required_settings(monkeypatch, tmp_path)
    monkeypatch.delenv("MW_CORE", raising=False)
    assert WorkerSettings.load().core == "native"
    monkeypatch.setenv("MW_CORE", "python")
    assert WorkerSettings.load().core == "python"


@pytest.mark.parametrize(
    "switch,default", [("native_consumer", True), ("native_effects", True), ("native_batch_poll", True)]
)
def test_the_native_switches_default_as_documented_and_act_only_on_the_native_core(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, switch: str, default: bool
) -> None:
    from mwcore.process.settings import WorkerSettings
    from mwcore.process.wiring import worker_config

    _required_settings(monkeypatch, tmp_path)
    monkeypatch.setenv("MW_CORE", "python")
    assert getattr(WorkerSettings.load(), switch) is default
    monkeypatch.setenv(f"MW_{switch.upper()}", "1")
    settings = WorkerSettings.load()
    assert getattr(worker_config(settings, settings.signer()), switch) is False  # the Python core ignores it
    from mwcore.core import installed

    if installed():
        monkeypatch.setenv("MW_CORE", "native")
        settings = WorkerSettings.load()
        assert getattr(worker_config(settings, settings.signer()), switch) is True
        monkeypatch.setenv(f"MW_{switch.upper()}", "0")
        settings = WorkerSettings.load()
        assert getattr(worker_config(settings, settings.signer()), switch) is False


def test_seen_buckets_are_on_by_default_as_documented_and_off_with_mw_seen_buckets_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mwcore.process.settings import WorkerSettings

    _required_settings(monkeypatch, tmp_path)
    monkeypatch.delenv("MW_SEEN_BUCKETS", raising=False)
    assert WorkerSettings.load().seen_buckets is True
    row = _readme_row("| `MW_SEEN_BUCKETS` | worker |")
    assert row.endswith("| `1` |"), row  # the README's default
    monkeypatch.setenv("MW_SEEN_BUCKETS", "0")
    assert WorkerSettings.load().seen_buckets is False


def test_commits_overlap_by_default_as_documented_and_not_with_mw_overlap_commits_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mwcore.process.settings import WorkerSettings
    from mwcore.process.wiring import worker_config
    from mwcore.runtime.config import WorkerConfig

    _required_settings(monkeypatch, tmp_path)
    monkeypatch.delenv("MW_OVERLAP_COMMITS", raising=False)
    settings = WorkerSettings.load()
    assert worker_config(settings, settings.signer()).overlap_commits is True
    assert WorkerConfig(bootstrap="127.0.0.1:9").overlap_commits is True  # a worker made in code, too
    row = _readme_row("| `MW_OVERLAP_COMMITS` | worker |")
    assert row.endswith("| `1` |"), row  # the README's default
    monkeypatch.setenv("MW_OVERLAP_COMMITS", "0")
    settings = WorkerSettings.load()
    assert worker_config(settings, settings.signer()).overlap_commits is False


def test_the_whole_state_read_and_the_cache_size_default_as_documented_and_reach_the_intervals(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mwcore.process.settings import WorkerSettings
    from mwcore.process.wiring import worker_config

    _required_settings(monkeypatch, tmp_path)
    for name, readme in [("MW_WHOLE_STATE_MB", "64"), ("MW_MAX_CACHE_KEYS", "100000")]:
        monkeypatch.delenv(name, raising=False)
        assert _readme_row(f"| `{name}` | worker |").endswith(f"| {readme} |")
    config = worker_config(settings := WorkerSettings.load(), settings.signer())
    assert (config.whole_state_mb, config.max_cache_keys) == (64, 100_000)
    monkeypatch.setenv("MW_WHOLE_STATE_MB", "3")
    monkeypatch.setenv("MW_MAX_CACHE_KEYS", "8")
    config = worker_config(settings := WorkerSettings.load(), settings.signer())
    assert (config.whole_state_mb, config.max_cache_keys) == (3, 8)


def test_the_injector_lingers_as_documented_and_as_mw_injector_linger_ms_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mwcore.process import wiring
    from mwcore.process.settings import InjectorSettings

    _required_settings(monkeypatch, tmp_path)
    monkeypatch.delenv("MW_INJECTOR_LINGER_MS", raising=False)
    assert InjectorSettings.load().injector_linger_ms == 20
    row = _readme_row("| `MW_INJECTOR_LINGER_MS` | injector |")
    assert row.endswith("| 20 |"), row  # the README's default
    built: dict[str, object] = {}
    monkeypatch.setattr(wiring, "Injector", lambda **kw: built.update(kw))
    monkeypatch.setattr(wiring, "redis_client", lambda url: None)  # (no Redis asked)
    monkeypatch.setenv("MW_INJECTOR_LINGER_MS", "50")
    wiring.build_injector("injector", {}, InjectorSettings.load())
    assert built["linger_ms"] == 50  # what the producer is built with
    monkeypatch.setenv("MW_INJECTOR_LINGER_MS", "5000")
    with pytest.raises(ConfigError, match="MW_INJECTOR_LINGER_MS"):
        InjectorSettings.load()


def test_batches_commit_after_5_ms_as_documented_and_as_mw_max_batch_delay_ms_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mwcore.api.signing import UNSIGNED
    from mwcore.process.wiring import worker_config

    _required_settings(monkeypatch, tmp_path)
    monkeypatch.delenv("MW_MAX_BATCH_DELAY_MS", raising=False)
    assert worker_config(WorkerSettings.load(), UNSIGNED).max_batch_delay_ms == 5
    row = _readme_row("| `MW_MAX_BATCH_RECORDS` / `MW_MAX_BATCH_DELAY_MS` | worker |")
    assert row.endswith("| 5000 / 5 |"), row  # the README's default
    monkeypatch.setenv("MW_MAX_BATCH_DELAY_MS", "10")
    assert worker_config(WorkerSettings.load(), UNSIGNED).max_batch_delay_ms == 10
