"""A progress bar on the terminal (stderr): redrawn in place on a terminal, a line
every few seconds otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import TextIO

from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK

WIDTH = 28


def _when(ms: int) -> str:
    if ms <= MIN_WATERMARK:
        return "-"
    if ms >= MAX_WATERMARK:
        return "end"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def render(label: str, done: int, total: int, elapsed_s: float, watermark: int) -> str:
    frac = min(1.0, done / total) if total else 1.0
    filled = int(frac * WIDTH)
    bar = "#" * filled + "-" * (WIDTH - filled)
    if elapsed_s < 1.0 and done < total:  # too early for a rate worth showing
        speed = "-/s  ETA -"
    else:
        rate = done / elapsed_s if elapsed_s > 0 else 0.0
        eta = (total - done) / rate if rate > 0 and total > done else 0.0
        speed = f"{rate:,.0f}/s  ETA {eta:.0f}s"
    return f"{label} [{bar}] {frac:4.0%} {done:,}/{total:,} records  {speed}  watermark {_when(watermark)}"


class Bar:
    def __init__(self, label: str, out: TextIO | None = None, every_s: float = 5.0) -> None:
        self.label = label
        self.out = out or sys.stderr
        self.tty = self.out.isatty()
        self.every_s = every_s
        self._last = 0.0
        self._finished = False  # the final line is drawn once

    def update(self, done: int, total: int, elapsed_s: float, watermark: int, final: bool = False) -> None:
        now = time.monotonic()
        if self._finished or (not final and not self.tty and now - self._last < self.every_s):
            return
        self._finished = final
        self._last = now
        line = render(self.label, done, total, elapsed_s, watermark)
        if self.tty:
            self.out.write("\r\x1b[2K" + line + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()
