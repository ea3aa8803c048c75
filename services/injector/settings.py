"""The injector service's configuration (``MW_*``), read once at start."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

import mwcore

DEFAULT_JITTER_MS = 2000


class InjectorSettings(mwcore.InjectorSettings):
    """The kit's injector settings, and where this one reads its query logs."""

    injector_dir: Path = Field(description="directory the query logs appear in")
    injector_jitter_ms: int | None = Field(default=None, ge=0)
    injector_poll_ms: int = Field(default=100, ge=1)

    def jitter_ms(self) -> int:
        """The bound on how much older than its file's second a record may be: set, or
        read from the generator's scenario.json (an integer from 0 to a day; anything
        else there is ignored), or 2000."""
        if self.injector_jitter_ms is not None:
            return self.injector_jitter_ms
        meta = self.injector_dir / "scenario.json"
        try:
            if meta.is_file() and not meta.is_symlink() and meta.stat().st_size <= 65_536:
                jitter = json.loads(meta.read_bytes()).get("jitter_ms", DEFAULT_JITTER_MS)
                if type(jitter) is int and 0 <= jitter <= 86_400_000:
                    return jitter
        except (OSError, ValueError, RecursionError, AttributeError):
            pass
        return DEFAULT_JITTER_MS
