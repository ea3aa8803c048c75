"""The test harness (``mwcore.testing``): a computation run in memory by the runtime's own
engine (``in_memory.py``), with what unit tests want on top: values go through the Avro
round trip a worker's would, keys come from the input's key extractor, outputs come back
decoded, and a call that raises raises (``raise_errors=False`` keeps it as a
``Failure``, as the runtime dead-letters it)::

    h = Harness(Windower)
    h.send("queries", {"query": "a", ...}, timestamp=1_000, key="a")
    h.advance_watermark(2_000)          # fires event-time timers below 2,000, in order
    assert h.values("window_counts") == [...]
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

from mwcore.api import headers as user_headers
from mwcore.api import ids
from mwcore.api.computation import Computation
from mwcore.api.headers import HeadersIn
from mwcore.runtime.in_memory import Failure, InMemoryRunner
from mwcore.serde.avro import SchemaRegistry, find_schemas


class Produced(NamedTuple):
    """A production, decoded."""

    key: str
    value: Any
    timestamp: int
    id: bytes
    headers: tuple[tuple[str, bytes], ...] = ()  # its user headers


class Harness(InMemoryRunner):
    """One computation, all keys, in memory (schemas: the project's ``schemas/`` unless
    ``registry`` is given)."""

    def __init__(
        self,
        computation: Computation[Any] | type[Computation[Any]],
        registry: SchemaRegistry | None = None,
        *,
        wall_ms: int = 0,
        raise_errors: bool = True,
    ) -> None:
        super().__init__(
            computation, registry or SchemaRegistry.from_directory(find_schemas()), wall_ms=wall_ms
        )
        self.raise_errors = raise_errors

    def send(
        self,
        stream: str,
        value: Any,
        timestamp: int,
        key: str | None = None,
        record_id: bytes | None = None,
        *,
        decoded: bool = False,
        headers: HeadersIn | None = None,
    ) -> None:
        """Process one record of input ``stream`` (keyed by the input's key extractor,
        else by ``key``), with user ``headers`` as ``ctx.produce`` takes them. Event-time
        timers fire only on ``advance_watermark``. The value (a dict, or the input's
        ``type``) goes through an Avro round trip unless ``decoded`` says it came from Avro;
        user code gets it as the input's type where it declares one."""
        inp, serde = self.input(stream)
        # what a worker would hand over; a decoded one copied (the caller's, made the
        # input's type, would become the record's own)
        value = copy.deepcopy(value) if decoded else serde.decode(serde.encode(self.plain(stream, value)))
        value = self.typed(stream, value)
        if inp.key is not None:
            key = inp.key(value)
        if key is None:
            raise ValueError(f"a record of {stream!r} needs a key (its input has no key extractor)")
        own = () if headers is None else user_headers.to_send(headers, bounded=False)
        self.process(stream, key, value, timestamp, record_id or ids.random_id(), own)

    def send_encoded(
        self, stream: str, data: bytes, timestamp: int, key: str | None = None, record_id: bytes | None = None
    ) -> None:
        """``send`` a value as archived (Avro-encoded)."""
        self.process_encoded(stream, data, timestamp, key or "", record_id or ids.random_id())

    def output(self, stream: str) -> list[Produced]:
        if stream not in self.outputs:
            raise KeyError(f"{stream!r} is not an output of {self.comp.name}")
        decode = self.outputs[stream].decode
        return [
            Produced(
                (p.key or b"").decode(), self.typed(stream, decode(p.value)), p.timestamp, p.id, p.headers
            )
            for p in self.productions()
            if p.topic == stream
        ]

    def values(self, stream: str) -> list[Any]:
        return [p.value for p in self.output(stream)]

    def _fail(self, failure: Failure) -> None:
        if self.raise_errors:
            raise failure.error
        super()._fail(failure)
