"""The injector service's configuration (``MW_*``), read once at start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError
from pydantic_settings import SettingsConfigDict

from mwcore.errors import ConfigError
from mwcore.process.settings import MetricsSettings


class InjectorSettings(MetricsSettings):
    model_config = SettingsConfigDict(env_prefix="MW_", extra="ignore")

    bootstrap: str = Field(description="Kafka bootstrap servers, host:port")
    redis_url: str = Field(description="Redis URL, redis://host:port/db")
    schemas_dir: Path = Field(description="directory of the Avro .avsc files")
    namespace: str = "default"
    injector_dir: Path = Field(description="directory the query logs appear in")
    injector_index: int = Field(default=0, ge=0)
    injector_processes: int = Field(default=1, ge=1)
    injector_jitter_ms: int | None = Field(default=None, ge=0)
    injector_poll_ms: int = Field(default=100, ge=1)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"

    @classmethod
    def load(cls) -> InjectorSettings:
        try:
            s = cls()  # type: ignore[call-arg]
        except ValidationError as exc:
            lines = [f"  MW_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()]
            raise ConfigError("invalid configuration:\n" + "\n".join(lines)) from None
        if s.injector_index >= s.injector_processes:
            raise ConfigError(f"MW_INJECTOR_INDEX={s.injector_index} must be below MW_INJECTOR_PROCESSES")
        if not s.schemas_dir.is_dir():
            raise ConfigError(f"MW_SCHEMAS_DIR={s.schemas_dir} is not a directory")
        return s

    def jitter_ms(self) -> int:
        """The bound on how much older than its file's second a record may be: set, or
        read from the generator's scenario.json, or 2000."""
        if self.injector_jitter_ms is not None:
            return self.injector_jitter_ms
        meta = self.injector_dir / "scenario.json"
        if meta.exists():
            return int(json.loads(meta.read_text()).get("jitter_ms", 2000))
        return 2000
