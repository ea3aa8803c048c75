"""What a worker counts (metrics read them when scraped; nothing else does)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Counters:
    records: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    late_records: int = 0
    timers_fired: int = 0
    late_productions: int = 0
    commits: int = 0
    fenced: int = 0
    redone: int = 0  # open batches dropped and redone carefully (runtime/effects.py)
    bloom_maybe: int = 0
    productions: int = 0  # sent to Kafka (re-sends after a crash or a failure included)
