"""What an interval needs from its worker, shared by all intervals of a worker: the
computation, the store, the codecs of its inputs and outputs, and the settings of the
record path (``interval.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mwcore.api.codecs import StateCodec
from mwcore.api.computation import Computation
from mwcore.api.signing import UNSIGNED, Signer
from mwcore.controls import SAFE, NegativeControls
from mwcore.core import Core
from mwcore.runtime.counters import Counters
from mwcore.runtime.faults import NO_FAULTS, Faults
from mwcore.runtime.intake import InputBinding
from mwcore.store.interface import CheckpointStore


@dataclass
class IntervalDeps:
    """What an interval needs from its worker (shared by all intervals of a worker)."""

    computation: Computation
    store: CheckpointStore
    codec: StateCodec[Any]
    inputs: dict[str, InputBinding]  # topic -> binding
    encoders: dict[str, tuple[str, Callable[[Any], bytes]]]  # stream -> (topic, encode)
    dead_letter_topic: str
    late_topic: str = ""  # "": drop late records (counted)
    exactly_once: bool = True
    max_cache_keys: int = 100_000
    # MW_WHOLE_STATE_MB: at acquisition, the whole state read when it is at most this many
    # bytes and max_cache_keys keys (0: each key read on first use; state_cache.py)
    whole_state_bytes: int = 0
    careful_s: float = 30.0  # after a redo: each call's state encoded at once at least this long
    seen_gc_slack_ms: int = 60_000  # seen ids are forgotten this long behind the input watermark
    faults: Faults = NO_FAULTS
    counters: Counters = field(default_factory=Counters)
    record_latency: bool = False  # keep each batch's record timestamps (benchmarks)
    on_error: Callable[[str, dict[str, Any]], None] = lambda event, info: None
    clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000
    witness_gated: bool = False  # productions and reports wait for the commit witness
    controls: NegativeControls = SAFE  # MW_UNSAFE_*: the negative controls (mwcore/controls.py)
    signer: Signer = UNSIGNED  # MW_ID_SECRET: input ids checked (api/signing.py)
    core: Core = "python"  # MW_CORE: which core's dedup filter (mwcore/core.py)
    native_messages: bool = False  # the native consumer's: the record path's steps 1-2 in Rust
    native_effects: bool = False  # MW_NATIVE_EFFECTS: user code run and its effects applied in Rust
    overlap_commits: bool = False  # MW_OVERLAP_COMMITS: the next batch is built while one commits
