"""What an interval needs from its worker, shared by all intervals of a worker: the
computation, the store, the core, the codecs of its inputs and outputs, and the
worker's settings (``interval.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mwcore.api.codecs import StateCodec
from mwcore.api.computation import Computation
from mwcore.runtime.config import Tuning, WorkerConfig
from mwcore.runtime.counters import Counters
from mwcore.runtime.faults import NO_FAULTS, Faults
from mwcore.runtime.intake import InputBinding
from mwcore.runtime.parts import Core
from mwcore.store.interface import CheckpointStore


@dataclass
class IntervalDeps:
    """What an interval needs from its worker (shared by all intervals of a worker)."""

    computation: Computation[Any]
    store: CheckpointStore
    core: Core  # the parts with two implementations (runtime/parts.py)
    config: WorkerConfig  # the worker's settings, as the process read them
    codec: StateCodec[Any]
    inputs: dict[str, InputBinding]  # topic -> binding
    encoders: dict[str, tuple[str, Callable[[Any], bytes]]]  # stream -> (topic, encode)
    dead_letter_topic: str
    late_topic: str = ""  # "": drop late records (counted)
    exactly_once: bool = True
    tuning: Tuning = field(default_factory=Tuning)
    faults: Faults = NO_FAULTS
    counters: Counters = field(default_factory=Counters)
    record_latency: bool = False  # keep each batch's record timestamps (benchmarks)
    on_error: Callable[[str, dict[str, Any]], None] = lambda event, info: None
    clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000
    topic_partitions: dict[str, int] = field(default_factory=dict)  # of what it reads and writes

    @property
    def whole_state_bytes(self) -> int:
        """At acquisition the whole state is read when at most this big (0: never)."""
        return self.config.whole_state_mb << 20
