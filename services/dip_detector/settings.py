"""The dip detector's configuration (``MW_DETECTOR_*``), read when it is created."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mwcore import load_settings
from services.dip_detector.episodes import SLOTS
from services.dip_detector.model import BUDGET, DAY_BUCKETS


class DetectorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MW_", extra="ignore")

    detector_day_s: int = Field(default=DAY_BUCKETS, ge=SLOTS)  # the daily rhythm's period, s
    detector_budget: float = Field(default=BUDGET, gt=0, le=100)  # false episodes per query per day

    @classmethod
    def load(cls) -> DetectorSettings:
        return load_settings(cls)
