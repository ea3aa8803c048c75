"""The injector service's configuration (``MW_*``), read once at start."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

import mwcore


class InjectorSettings(mwcore.InjectorSettings):
    """The kit's injector settings, and where this one reads its query logs."""

    injector_dir: Path = Field(description="directory the query logs appear in")
    injector_jitter_ms: int | None = Field(default=None, ge=0)
    injector_poll_ms: int = Field(default=100, ge=1)

    def jitter_ms(self) -> int:
        """The bound on how much older than its file's second a record may be: set, or
        read from the generator's scenario.json, or 2000."""
        if self.injector_jitter_ms is not None:
            return self.injector_jitter_ms
        meta = self.injector_dir / "scenario.json"
        if meta.exists():
            return int(json.loads(meta.read_text()).get("jitter_ms", 2000))
        return 2000
