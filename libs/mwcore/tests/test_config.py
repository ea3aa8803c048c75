from __future__ import annotations

import os
from pathlib import Path

import pytest

from mwcore.errors import ConfigError
from mwcore.process.settings import WorkerSettings
from mwcore.runtime.faults import Faults
from testbed.native import requires_native


def _required_settings(monkeypatch: pytest.MonkeyPatch, schemas: Path) -> None:
    """What every process must be given, set to values that load (nothing is asked); no
    other setting from the environment (a session's stack sets MW_SCHEMA_REGISTRY_URL)."""
    for name in [n for n in os.environ if n.startswith("MW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MW_BOOTSTRAP", "127.0.0.1:9092")
    monkeypatch.setenv("MW_REDIS_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("MW_SCHEMAS_DIR", str(schemas))


def _readme_row(start: str) -> str:
    """The settings table's row (docs/operating.md) that starts with ``start``."""
    readme = (Path(__file__).resolve().parents[3] / "docs" / "operating.md").read_text().splitlines()
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
    from mwcore.cores import native

    monkeypatch.setattr(native, "rust", None)  # as if never built
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


@requires_native
def test_the_native_core_is_the_default_where_it_is_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _required_settings(monkeypatch, tmp_path)
    monkeypatch.delenv("MW_CORE", raising=False)
    assert WorkerSettings.load().core == "native"
    monkeypatch.setenv("MW_CORE", "python")
    assert WorkerSettings.load().core == "python"


@pytest.mark.parametrize(
    ("var", "says"),
    [
        ("MW_NATIVE_CONSUMER", "always reads with its own consumer"),
        ("MW_NATIVE_BATCH_POLL", "in one call"),
        ("MW_NATIVE_EFFECTS", "always runs user code's effects in Rust"),
        ("MW_OVERLAP_COMMITS", "always writes a checkpoint while it builds the next batch"),
        ("MW_FUZZ_SECONDS", "renamed MW_TEST_FUZZ_SECONDS"),
    ],
)
def test_a_variable_no_longer_read_stops_the_process_saying_what_replaced_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, var: str, says: str
) -> None:
    _required_settings(monkeypatch, tmp_path)
    monkeypatch.setenv(var, "0")
    with pytest.raises(ConfigError, match=f"{var}: no longer read") as err:
        WorkerSettings.load()
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("var", ["MW_MAX_BATCH_RECORD", "mw_witness_gates", "MW_"])
def test_a_variable_no_setting_reads_stops_the_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, var: str
) -> None:
    """A misspelt setting (any case, as settings are read) would silently leave its
    default in force: it is refused with one line. Settings of another process's own
    settings class (a service's) are refused as well: each process is given its own."""
    _required_settings(monkeypatch, tmp_path)
    monkeypatch.setenv(var, "1")
    with pytest.raises(ConfigError, match=f"{var}: no setting of the kit or of this process reads it"):
        WorkerSettings.load()


def test_the_families_read_apart_and_the_test_plumbing_are_known(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mwcore.process.plumbing import Plumbing

    _required_settings(monkeypatch, tmp_path)
    for var, value in [
        ("MW_KAFKA_SOCKET_KEEPALIVE_ENABLE", "true"),  # a librdkafka property
        ("MW_TEST_RELEASE", "/tmp/x"),  # tests' own
        ("MW_UNSAFE_DISABLE_DEDUP", "0"),  # a negative control
        ("MW_FAULTS", "after_commit:kill:0.5"),  # test plumbing: not a setting, known
        ("MW_KAFKA_HOME", "/tmp/kafka"),  # the local stack's
        ("MW_INJECTOR_LINGER_MS", "7"),  # the kit's injector's, known to every process
    ]:
        monkeypatch.setenv(var, value)
    settings = WorkerSettings.load()
    assert not hasattr(settings, "faults") and not hasattr(settings, "latency_out")
    assert Plumbing.load().faults == "after_commit:kill:0.5"


def test_a_worker_is_configured_by_its_settings_object_and_their_defaults_are_stated_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What a process reads at its edge is the runtime's ``WorkerConfig``: handed down as
    it is, and a worker made in code without it gets the same defaults."""
    from mwcore.runtime.config import WorkerConfig

    _required_settings(monkeypatch, tmp_path)
    settings = WorkerSettings.load()
    assert isinstance(settings, WorkerConfig)
    made = WorkerConfig(bootstrap="127.0.0.1:9092")
    for name in WorkerConfig.model_fields:
        if name != "worker_id":  # (the host and pid)
            assert getattr(made, name) == getattr(settings, name), name
    monkeypatch.setenv("MW_WHOLE_STATE_MB", "3")
    monkeypatch.setenv("MW_MAX_CACHE_KEYS", "8")
    monkeypatch.setenv("MW_MAX_BATCH_DELAY_MS", "10")
    settings = WorkerSettings.load()
    assert (settings.whole_state_mb, settings.max_cache_keys, settings.max_batch_delay_ms) == (3, 8, 10)


def test_seen_buckets_are_on_by_default_as_documented_and_off_with_mw_seen_buckets_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _required_settings(monkeypatch, tmp_path)
    monkeypatch.delenv("MW_SEEN_BUCKETS", raising=False)
    assert WorkerSettings.load().seen_buckets is True
    row = _readme_row("| `MW_SEEN_BUCKETS` | worker |")
    assert row.endswith("| `1` |"), row  # the table's default
    monkeypatch.setenv("MW_SEEN_BUCKETS", "0")
    assert WorkerSettings.load().seen_buckets is False


def test_the_injector_lingers_as_documented_and_as_mw_injector_linger_ms_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mwcore.process import wiring
    from mwcore.process.settings import InjectorSettings

    _required_settings(monkeypatch, tmp_path)
    monkeypatch.delenv("MW_INJECTOR_LINGER_MS", raising=False)
    assert InjectorSettings.load().injector_linger_ms == 20
    row = _readme_row("| `MW_INJECTOR_LINGER_MS` | injector |")
    assert row.endswith("| 20 |"), row  # the table's default
    built: dict[str, object] = {}
    monkeypatch.setattr(wiring, "Injector", lambda **kw: built.update(kw))
    monkeypatch.setattr(wiring, "redis_client", lambda url: None)  # (no Redis asked)
    monkeypatch.setenv("MW_INJECTOR_LINGER_MS", "50")
    wiring.build_injector("injector", {}, InjectorSettings.load())
    assert built["linger_ms"] == 50  # what the producer is built with
    monkeypatch.setenv("MW_INJECTOR_LINGER_MS", "5000")
    with pytest.raises(ConfigError, match="MW_INJECTOR_LINGER_MS"):
        InjectorSettings.load()
