"""The model job's configuration (``MW_*``), read once at start."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mwcore import ConfigError, load_settings


class TrainerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MW_", extra="ignore")

    bootstrap: str = Field(description="Kafka bootstrap servers, host:port")
    schemas_dir: Path = Field(description="directory of the Avro .avsc files")
    namespace: str = "default"
    model_period_ms: int = Field(default=86_400_000, gt=0)  # the rhythm: a day
    model_slots: int = Field(default=1440, gt=0)  # slots of the period (1440: minutes of a day)
    spark_master: str = "local[2]"

    @model_validator(mode="after")
    def _slots(self) -> TrainerSettings:
        slot = self.model_period_ms // self.model_slots
        if self.model_period_ms % self.model_slots or slot % 1000:
            raise ValueError(
                f"MW_MODEL_PERIOD_MS={self.model_period_ms} does not cut into "
                f"MW_MODEL_SLOTS={self.model_slots} slots of whole seconds"
            )
        return self

    @classmethod
    def load(cls, **overrides: object) -> TrainerSettings:
        s = load_settings(cls, **overrides)
        if not s.schemas_dir.is_dir():
            raise ConfigError(f"MW_SCHEMAS_DIR={s.schemas_dir} is not a directory")
        return s
