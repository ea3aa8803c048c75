"""Where a worker learns its computation's input low watermark (the timer clock).

The watermark authority (a separate service) is one source; tests drive the
watermark by hand through ``store.manual_watermark.RedisWatermark``. Every source is monotonic: a value
lower than one already returned is ignored.
"""

from __future__ import annotations

from typing import Protocol

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
