"""A watermark set by hand in Redis: the seam through which tests (and operators, in an
emergency) drive a computation's input watermark (``MW_WATERMARK=redis``)."""

from __future__ import annotations

import time

from mwcore.api.clock import MIN_WATERMARK
from mwcore.store.client import RedisClient


class RedisWatermark:
    """Reads ``<prefix>:<computation>`` from Redis at most every ``refresh_s`` seconds.

    The seam through which tests (and operators, in an emergency) drive a watermark by
    hand; the watermark authority replaces it in a full deployment.
    """

    def __init__(self, client: RedisClient, prefix: str = "mw:wm", refresh_s: float = 0.05):
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
