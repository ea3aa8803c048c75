"""The model job's configuration (``MW_*``), read once at start: the library's client
settings (``MW_BOOTSTRAP``, ``MW_NAMESPACE``) and the job's own."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from mwcore import ClientSettings, ConfigError


class TrainerSettings(ClientSettings):
    schemas_dir: Path = Field(description="directory of the Avro .avsc files")
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

    def check(self) -> None:
        if not self.schemas_dir.is_dir():
            raise ConfigError(f"MW_SCHEMAS_DIR={self.schemas_dir} is not a directory")
