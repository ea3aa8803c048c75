"""Where a worker's time goes: py-spy samples of a running worker process, summed into
the shares the docs quote.

``Spy(pid, out)`` records the process (``py-spy record --format raw``: one collapsed
stack and its sample count per line) from ``start()`` until ``stop()``, so a bench
profiles exactly its timed span. ``breakdown(out)`` turns the samples into shares:
inclusive (a frame anywhere in the stack) for each of ``PARTS``, the kit's parts of
the per-record path, and self time (the innermost frame) for the top functions.

Run on its own to summarise a file again: ``.venv/bin/python bench/profiling.py FILE``.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

# (label, a frame's "function (file)" must contain this; "*" stands for any text) for
# the inclusive shares
PARTS: tuple[tuple[str, str], ...] = (
    ("poll (librdkafka to Python messages)", "poll (mwcore/*consumer.py"),
    ("intake: ids, dedup, decode, user code", "process (mwcore/runtime/intake.py"),
    ("  Avro decode of inputs", "decode (<avro codec"),
    ("  dedup (seen ids)", "duplicates (mwcore/runtime/dedup.py"),
    ("  user process_record", "process_record ("),
    ("  effects applied (state, timers, productions)", "apply (mwcore/runtime/effects.py"),
    ("  user code and its effects, in Rust (native)", "records (mwcore/cores/native/effects.py"),
    ("firing timers", "fire (mwcore/runtime/effects.py"),
    ("  TimerQueue.due", "due (mwcore/runtime/timers.py"),
    ("  user process_timer", "process_timer ("),
    ("state encode (JsonCodec.encode)", "encode (mwcore/api/codecs.py"),
    ("state decode (JsonCodec.decode)", "decode (mwcore/api/codecs.py"),
    ("commit (prepare, pack, Redis)", "Worker.commit (mwcore/runtime/worker.py"),
    ("  packing the Lua call", "pack_call (mwcore/store/fast_script.py"),
    ("commit thread: packing and the round trip", "commit_many (mwcore/store/redis_store.py"),
    ("  packing the Lua call (native)", "_commit_call (mwcore/store/redis_store.py"),
    ("sending productions", "Worker.send (mwcore/runtime/worker.py"),
    ("  Avro encode of productions", "encode (<avro codec"),
    ("delivery reports (native producer)", "NativeSender.poll (mwcore/cores/native/sender.py"),
    ("watermark reports", "step (mwcore/runtime/watermark_reporter.py"),
)


_LINE = re.compile(r":\d+\)$")


class Spy:
    """py-spy attached to ``pid`` between ``start`` and ``stop`` (nothing if py-spy is
    missing: ``available`` is then False)."""

    def __init__(self, pid: int, out: Path, rate: int = 200) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self.exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.available = Path(self.exe).exists()
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if not self.available or self._proc is not None:
            return
        self._proc = subprocess.Popen(
            [self.exe, "record", "--pid", str(self.pid), "--rate", str(self.rate), "--format", "raw",
             "--output", str(self.out), "--nonblocking"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            self._proc.wait(60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._proc = None


def breakdown(path: Path, top: int = 12) -> dict[str, Any]:
    """The shares of ``PARTS`` (inclusive) and the ``top`` functions by self time."""
    stacks: list[tuple[list[str], int]] = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    total = sum(n for _, n in stacks)
    if not total:
        return {"samples": 0}
    inclusive: dict[str, float] = {}
    for label, needle in PARTS:
        pattern = f"*{needle}*"
        hit = sum(n for frames, n in stacks if any(fnmatchcase(f, pattern) for f in frames))
        inclusive[label] = round(100 * hit / total, 1)
    selfs: Counter[str] = Counter()
    for frames, n in stacks:
        selfs[_LINE.sub(")", frames[-1])] += n  # by function, not by line
    return {
        "samples": total,
        "inclusive_pct": inclusive,
        "self_pct": {f: round(100 * n / total, 1) for f, n in selfs.most_common(top)},
    }


if __name__ == "__main__":
    print(json.dumps(breakdown(Path(sys.argv[1])), indent=1))
