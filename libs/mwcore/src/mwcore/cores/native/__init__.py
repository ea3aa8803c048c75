"""The native core (``MW_CORE=native``): the parts of ``runtime.parts.Core`` in Rust,
module ``mwcore_native`` (``libs/mwcore/native``), typed by its stub
(``libs/mwcore/native/mwcore_native.pyi``, checked against the module by
``mypy.stubtest`` in ``make lint``).

This package is the only one that imports the module (``rust`` here: tests reach the
module's classes through it). At import the module is given the constants and error
texts both sides must agree on, each defined once in the package (``constants.py``). A
part wraps its Rust type where the runtime's protocol needs more than the type gives
(``consumer.py``, ``sender.py``, ``codecs.py``, ``effects.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

from mwcore.api.computation import Computation
from mwcore.api.context import Encoder
from mwcore.api.record import Record, TimeDomain
from mwcore.api.signing import Signer
from mwcore.controls import NegativeControls
from mwcore.errors import ConfigError, SerializationError
from mwcore.limits import MAX_KEY_BYTES, MAX_TIMESTAMP, MIN_TIMESTAMP
from mwcore.runtime.bloom import Filter
from mwcore.runtime.counters import Counters
from mwcore.runtime.effects import Applier
from mwcore.runtime.envelope import Envelope, IdReader
from mwcore.runtime.screening import Screener, key_error
from mwcore.runtime.state_cache import StateCache
from mwcore.runtime.timers import Timers
from mwcore.serde.avro import AvroSerde
from mwcore.serde.framing import with_schema_id_header
from mwcore.serde.typed import Typed
from mwcore.store.checkpoint import Checkpoint, TimerEntry
from mwcore.store.checkpoint_wire import CommitPacker
from mwcore.store.fast_script import Packed
from mwcore.transport.consumer import Member, OnCommitted
from mwcore.transport.producer import ProductionSender

__all__ = ["DOMAINS", "NativeCore", "installed", "is_panic", "pack_commit", "panic_on_key", "require", "rust"]

_MISSING = "it is not importable"
try:
    import mwcore_native as rust
except ImportError as exc:  # not built: MW_CORE=python runs, MW_CORE=native says how to build it
    rust = None  # type: ignore[assignment]
    _MISSING = str(exc)
else:
    from mwcore.cores.native.constants import give

    give(rust)

DOMAINS = (TimeDomain.EVENT, TimeDomain.WALL, TimeDomain.HOLD)  # the native core's domain indexes


def installed() -> bool:
    """Whether the native module is built and installed."""
    return rust is not None


def require() -> None:
    """``ConfigError`` (one line: what to do) unless the native module is installed."""
    if rust is None:
        raise ConfigError(
            "MW_CORE=native: the native core is not installed (build it with make bootstrap, "
            f"which needs Rust's cargo: https://rustup.rs), or set MW_CORE=python ({_MISSING})"
        )


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a panic of the native core outside its per-record code
    (PyO3's ``PanicException``; within it a panic is an ``InternalError``)."""
    return rust is not None and isinstance(exc, rust.PanicException)


def panic_on_key(key: str) -> None:
    """Test plumbing (``MW_PANIC_KEY``): the native core panics before user code runs on
    a record of ``key``."""
    require()
    rust.panic_on_key(key)


class NativeReader:
    """The envelope read in Rust (``runtime/envelope.rs``), of the native consumer's messages."""

    def __init__(self, signer: Signer) -> None:
        self._key = signer.mac_key
        self._v1 = signer.accepts_v1

    def read(self, messages: Any) -> Envelope:
        return rust.read_ids(messages, self._key, self._v1)


class NativeCore:
    """The native parts (``mwcore.runtime.parts.Core``)."""

    name = "native"

    def __init__(self) -> None:
        require()
        # one per process: its table of the strings that recur serves every interval
        self._screener = rust.Screener(
            Record,
            SerializationError,
            key_error,
            with_schema_id_header,
            MIN_TIMESTAMP,
            MAX_TIMESTAMP,
            MAX_KEY_BYTES,
        )

    def filter(self, capacity: int) -> Filter:
        return rust.Bloom(capacity)

    def timer_queue(self) -> Timers:
        return rust.TimerQueue(TimerEntry, DOMAINS)

    def reader(self, signer: Signer) -> IdReader:
        return NativeReader(signer)

    def screener(self) -> Screener:
        # (it screens the native consumer's messages only, which this core's intake reads)
        return cast(Screener, self._screener)

    def applier(
        self,
        computation: Computation[Any],
        cache: StateCache,
        timers: Timers,
        encoders: dict[str, tuple[str, Encoder]],
        clock: Callable[[], int],
        counters: Counters,
        controls: NegativeControls,
        careful: bool,
    ) -> Applier:
        from mwcore.cores.native.effects import NativeApplier

        return NativeApplier(computation, cache, timers, encoders, clock, counters, controls, careful)

    def decoder(self, serde: AvroSerde, typed: Typed | None = None) -> Callable[[bytes], Any]:
        from mwcore.cores.native.codecs import decoding

        return decoding(serde, typed)

    def encoder(self, serde: AvroSerde, typed: Typed | None = None) -> Callable[[Any], bytes]:
        from mwcore.cores.native.codecs import encoding

        return encoding(serde, typed)

    def consumer(
        self,
        bootstrap: str,
        group: str,
        instance_id: str | None,
        session_timeout_ms: int,
        on_committed: OnCommitted,
    ) -> Member:
        from mwcore.cores.native.consumer import NativeGroupConsumer

        return NativeGroupConsumer(bootstrap, group, instance_id, session_timeout_ms, on_committed)

    def sender(self, bootstrap: str) -> ProductionSender:
        from mwcore.cores.native.sender import NativeSender

        return NativeSender(bootstrap)

    def packer(self) -> CommitPacker:
        return pack_commit


def pack_commit(sha: str, keys: Any, token: str, fencing: bool, cp: Checkpoint) -> Packed:
    """The commit script's whole call packed in Rust (``store/checkpoint.rs``): the bytes
    ``fast_script.pack_call(sha, keys, commit_args(token, fencing, cp))`` gives."""
    return Packed(
        rust.pack_commit(
            sha,
            keys,
            token,
            fencing,
            cp.commit_id or os.urandom(16),
            cp.state,
            cp.timers,
            cp.pending,
            cp.acked,
            cp.seen,
            cp.positions,
            cp.seen_gc_below,
            cp.segments,
        )
    )
