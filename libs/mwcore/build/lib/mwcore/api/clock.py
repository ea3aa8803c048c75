"""Time: event time's bounds (the watermark before any record and after the last one),
and the wall clock the runtime reads (injected, so tests can move it by hand)."""

from __future__ import annotations

import time

MIN_WATERMARK = -(2**63)  # the beginning of time: nothing is complete yet
MAX_WATERMARK = 2**63 - 1  # the end of time: the input is complete


class Clock:
    """Wall-clock time in milliseconds since the epoch; tests substitute their own."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000
