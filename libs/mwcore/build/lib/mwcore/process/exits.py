"""What a child process's end says: its exit code or signal, and the last line of its
output that tells what went wrong (``mw up`` and ``mw run --processes`` report both at
once, so that a service that dies is never silent)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterable
from pathlib import Path

TAIL_BYTES = 65_536


def describe(returncode: int) -> str:
    """``exit code 2``, or ``killed by SIGKILL``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def last_error(lines: Iterable[str]) -> str:
    """The last line that says what went wrong: the kit's one line (``mw: ...``), an
    exception, or a log line at warning or above; else the last line. librdkafka's own
    lines (``%3|...``) are left out."""
    last, error = "", ""
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("%"):
            continue
        last = line
        if (line.startswith("mw") and ": " in line) or _is_exception(line) or _is_bad_log(line):
            error = line
    return (error or last)[:500]


def last_error_in(path: Path) -> str:
    """``last_error`` of the end of a log file (what there is of it)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return last_error(text.splitlines())


def _is_exception(line: str) -> bool:
    head = line.split(":", 1)[0]
    return head.endswith(("Error", "Exception")) and " " not in head


def _is_bad_log(line: str) -> bool:
    if not line.startswith("{"):
        return False
    try:
        level = json.loads(line).get("level")
    except (ValueError, AttributeError, RecursionError):
        return False
    return level in ("warning", "error", "critical")
