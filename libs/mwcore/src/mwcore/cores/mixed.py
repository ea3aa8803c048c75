"""A core of mixed parts (``mwcore.cores.mixed``): for tests and benchmarks of one part on
its own, never a setting. Parts that work together come from one core: the consumer,
the envelope's reader and the screener (``intake``), which read the consumer's
messages; the timer queue and the applier (``effects``), which fires from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mwcore.api.computation import Computation
from mwcore.api.context import Encoder
from mwcore.api.signing import Signer
from mwcore.controls import NegativeControls
from mwcore.runtime.bloom import Filter
from mwcore.runtime.counters import Counters
from mwcore.runtime.effects import Applier
from mwcore.runtime.envelope import IdReader
from mwcore.runtime.parts import Core
from mwcore.runtime.screening import Screener
from mwcore.runtime.state_cache import StateCache
from mwcore.runtime.timers import Timers
from mwcore.serde.avro import AvroSerde
from mwcore.serde.typed import Typed
from mwcore.store.checkpoint_wire import CommitPacker
from mwcore.transport.consumer import Member, OnCommitted
from mwcore.transport.producer import ProductionSender


@dataclass(frozen=True)
class Mixed:
    base: Core  # the filter, the codecs, the sender, the packer
    effects: Core  # the timer queue and the applier
    intake: Core  # the consumer, the reader and the screener

    @property
    def name(self) -> str:
        return f"{self.base.name}+effects:{self.effects.name}+intake:{self.intake.name}"

    def filter(self, capacity: int) -> Filter:
        return self.base.filter(capacity)

    def timer_queue(self) -> Timers:
        return self.effects.timer_queue()

    def reader(self, signer: Signer) -> IdReader:
        return self.intake.reader(signer)

    def screener(self) -> Screener:
        return self.intake.screener()

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
        return self.effects.applier(computation, cache, timers, encoders, clock, counters, controls, careful)

    def decoder(self, serde: AvroSerde, typed: Typed | None = None) -> Callable[[bytes], Any]:
        return self.base.decoder(serde, typed)

    def encoder(self, serde: AvroSerde, typed: Typed | None = None) -> Callable[[Any], bytes]:
        return self.base.encoder(serde, typed)

    def consumer(
        self,
        bootstrap: str,
        group: str,
        instance_id: str | None,
        session_timeout_ms: int,
        on_committed: OnCommitted,
    ) -> Member:
        return self.intake.consumer(bootstrap, group, instance_id, session_timeout_ms, on_committed)

    def sender(self, bootstrap: str) -> ProductionSender:
        return self.base.sender(bootstrap)

    def packer(self) -> CommitPacker:
        return self.base.packer()
