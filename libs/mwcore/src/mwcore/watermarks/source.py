"""Where a worker learns its computation's input low watermark (the timer clock).

The watermark authority (a separate service) is one source; tests drive the
watermark by hand through ``RedisWatermark``. Every source is monotonic: a value
lower than one already returned is ignored.
"""

from __future__ import annotations

import time
from typing import Protocol

import redis

from mwcore.api.clock import MIN_WATERMARK


class WatermarkSource(Protocol):
    def input_watermark(self, computation: str) -> int:
        """Event time (ms) below which no more input will arrive (except late data)."""
        ...


class FixedWatermark:
    """A constant watermark: MIN holds event timers, MAX fires them all (end of input)."""

    def __init__(self, value: int = MIN_WATERMARK) -> None:
        self.value = value

    def input_watermark(self, computation: str) -> int:
        return self.value


class RedisWatermark:
    """Reads ``<prefix>:<computation>`` from Redis at most every ``refresh_s`` seconds.

    The seam through which tests (and operators, in an emergency) drive a watermark by
    hand; the watermark authority replaces it in a full deployment.
    """

    def __init__(self, client: redis.Redis, prefix: str = "mw:wm", refresh_s: float = 0.05):
        self._r = client
        self._prefix = prefix
        self._refresh = refresh_s
        self._last: dict[str, int] = {}
        self._read_at: dict[str, float] = {}

    def input_watermark(self, computation: str) -> int:
        now = time.monotonic()
        if now - self._read_at.get(computation, 0.0) >= self._refresh:
            self._read_at[computation] = now
            raw = self._r.get(f"{self._prefix}:{computation}")
            if raw is not None:
                value = int(raw)
                if value > self._last.get(computation, MIN_WATERMARK):
                    self._last[computation] = value
        return self._last.get(computation, MIN_WATERMARK)
