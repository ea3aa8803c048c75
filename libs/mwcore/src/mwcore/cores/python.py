"""The pure-Python core: the reference of every part (``MW_CORE=python``).

Each part is the runtime's own implementation, on confluent-kafka's consumer and
producer; the native core is held to these by the differential tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mwcore.api.computation import Computation
from mwcore.api.context import Encoder
from mwcore.api.signing import Signer
from mwcore.controls import NegativeControls
from mwcore.runtime.bloom import BloomFilter, Filter
from mwcore.runtime.counters import Counters
from mwcore.runtime.effects import Applier
from mwcore.runtime.envelope import IdReader, ReferenceReader
from mwcore.runtime.screening import ReferenceScreener, Screener
from mwcore.runtime.state_cache import StateCache
from mwcore.runtime.timers import TimerQueue, Timers
from mwcore.serde.avro import AvroSerde
from mwcore.serde.typed import Typed, decoding, encoding
from mwcore.store.checkpoint_wire import CommitPacker, reference_packer
from mwcore.transport.consumer import GroupConsumer, Member, OnCommitted
from mwcore.transport.producer import ProductionSender, Sender


class PythonCore:
    """The reference parts (``mwcore.runtime.parts.Core``)."""

    name = "python"

    def __init__(self) -> None:
        self._screener = ReferenceScreener()

    def filter(self, capacity: int) -> Filter:
        return BloomFilter(capacity)

    def timer_queue(self) -> Timers:
        return TimerQueue()

    def reader(self, signer: Signer) -> IdReader:
        return ReferenceReader(signer)

    def screener(self) -> Screener:
        return self._screener

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
        return Applier(computation, cache, timers, encoders, clock, counters, controls, careful)

    def decoder(self, serde: AvroSerde, typed: Typed | None = None) -> Callable[[bytes], Any]:
        return serde.decode if typed is None else decoding(serde.decode, typed.read)

    def encoder(self, serde: AvroSerde, typed: Typed | None = None) -> Callable[[Any], bytes]:
        return serde.encode if typed is None else encoding(serde.encode, typed.write)

    def consumer(
        self,
        bootstrap: str,
        group: str,
        instance_id: str | None,
        session_timeout_ms: int,
        on_committed: OnCommitted,
    ) -> Member:
        return GroupConsumer(bootstrap, group, instance_id, session_timeout_ms, on_committed)

    def sender(self, bootstrap: str) -> ProductionSender:
        return Sender(bootstrap)

    def packer(self) -> CommitPacker:
        return reference_packer
