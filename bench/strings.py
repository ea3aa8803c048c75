"""The memory the native screener's table of recurring strings holds (``strings.rs``).

Run: ``.venv/bin/python bench/strings.py [--rounds 6]``; prints a line a round and JSON
(the last line).

Each round screens 32,768 messages (one generation's worth) whose keys are all new and
as costly as the table takes: 64 bytes, mostly not ASCII (a 10-digit number and 27
``é``). The process's resident memory is read after each round, against what it was
before the first: it must level off once the table holds its two generations, not
grow with the keys seen. What the figures include besides the table: the messages
and records of the round (freed, but kept by Python's allocator for reuse).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mwcore.cores import core
from mwcore.cores.native import rust
from mwcore.runtime.screening import Bindings

PAGE = 4096


def resident_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    screener = core("native").screener()
    generation = rust.STRINGS_GENERATION
    bindings: Bindings = {"in": ("s", lambda raw: None)}
    rids = [i.to_bytes(16, "big") for i in range(generation)]
    base = resident_mb()
    grown: list[float] = []
    for r in range(args.rounds):
        messages = [
            rust.Msg("in", 0, i, (f"{r * generation + i:010d}" + "é" * 27).encode(), b"", (1, 5), None)
            for i in range(generation)
        ]
        out = screener.screen(messages, rids, None, set(), {}, {}, {}, set(), bindings)
        del messages, out
        grown.append(round(resident_mb() - base, 1))
        print(f"round {r}: {(r + 1) * generation:,} keys seen, {grown[-1]} MB above the start", flush=True)
    kept = 2 * generation
    print(json.dumps({"keys_seen": args.rounds * generation, "kept_at_most": kept, "grown_mb": grown}))


if __name__ == "__main__":
    main()
