"""What the runtime asks of a core: every part of the per-record and per-commit paths
that has two implementations, handed out by one object.

A worker is given its ``Core`` once, at the process's edge (``process.wiring``, from
``MW_CORE``); the seam (``mwcore.cores``) makes the two there are, the pure-Python
reference and the native one (Rust). Below the seam nothing knows which core runs: a
record goes through the same calls on either (``intake.py``: ``reader.read``,
``screener.screen``, ``applier.records``), and each part's protocol names what both
implementations do. Tests build both side by side for the differential tests, and a
core of mixed parts where they need one (``mwcore.cores.mixed``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from mwcore.api.computation import Computation
from mwcore.api.context import Encoder
from mwcore.api.signing import Signer
from mwcore.controls import NegativeControls
from mwcore.runtime.bloom import Filter
from mwcore.runtime.counters import Counters
from mwcore.runtime.effects import Applier
from mwcore.runtime.envelope import IdReader
from mwcore.runtime.screening import Screener
from mwcore.runtime.state_cache import StateCache
from mwcore.runtime.timers import Timers
from mwcore.serde.avro import AvroSerde
from mwcore.serde.typed import Typed
from mwcore.store.checkpoint_wire import CommitPacker
from mwcore.transport.consumer import Member, OnCommitted
from mwcore.transport.producer import ProductionSender


class Core(Protocol):
    """The parts of one core. Each call makes a new part (a core holds no state of an
    interval or a worker); the parts of one core work together (the screener reads the
    messages of its consumer, the applier fires from its timer queue)."""

    @property
    def name(self) -> str:
        """What it is called in logs and benchmarks' output (``MW_CORE``'s value)."""
        ...

    def filter(self, capacity: int) -> Filter:
        """A Bloom filter of record ids for about ``capacity`` ids (``dedup.py``)."""
        ...

    def timer_queue(self) -> Timers:
        """An interval's pending timers (``timers.py``)."""
        ...

    def reader(self, signer: Signer) -> IdReader:
        """Reads a chunk's record ids and late marks, checking ids with ``signer``
        (``envelope.py``)."""
        ...

    def screener(self) -> Screener:
        """Screens a chunk before user code (``screening.py``); one per process."""
        ...

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
        """Runs user code on an interval's records and timers (``effects.py``);
        ``timers``: this core's ``timer_queue``."""
        ...

    def decoder(self, serde: AvroSerde, typed: Typed | None = None) -> Callable[[bytes], Any]:
        """``serde.decode``: the same values and errors (each value made ``typed``'s type,
        where given: ``serde/typed.py``)."""
        ...

    def encoder(self, serde: AvroSerde, typed: Typed | None = None) -> Callable[[Any], bytes]:
        """``serde.encode``: the same bytes and errors (taking ``typed``'s type too)."""
        ...

    def consumer(
        self,
        bootstrap: str,
        group: str,
        instance_id: str | None,
        session_timeout_ms: int,
        on_committed: OnCommitted,
    ) -> Member:
        """A worker's member of its consumer group (``transport/consumer.py``)."""
        ...

    def sender(self, bootstrap: str) -> ProductionSender:
        """Sends a worker's productions (``transport/producer.py``)."""
        ...

    def packer(self) -> CommitPacker:
        """Makes the commit script's call of a checkpoint (``store/checkpoint_wire.py``)."""
        ...
