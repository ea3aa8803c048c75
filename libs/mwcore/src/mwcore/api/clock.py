"""Event time's bounds: the watermark before any record and after the last one."""

from __future__ import annotations

MIN_WATERMARK = -(2**63)  # the beginning of time: nothing is complete yet
MAX_WATERMARK = 2**63 - 1  # the end of time: the input is complete
