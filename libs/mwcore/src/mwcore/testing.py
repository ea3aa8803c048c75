"""Run a computation in memory, as the runtime would, without Kafka or Redis.

For unit tests of user code (and for running a computation over data already at hand):
records go through the same Avro round trip, the same ``Context``, the same state codec
and the same timer queue as in a worker, so what a computation does here is what it
does in the pipeline::

    h = Harness(Windower)
    h.send("queries", {"query": "a", ...}, timestamp=1_000, key="a")
    h.advance_watermark(2_000)          # fires event-time timers below 2,000, in order
    assert h.output("window_counts") == [...]

It proves nothing about exactly-once delivery or fencing: the system tests do that
against a real broker and Redis.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from mwcore.api import ids
from mwcore.api.clock import MIN_WATERMARK
from mwcore.api.computation import Computation
from mwcore.api.context import Context, Effects, Encoder
from mwcore.api.record import Record, TimeDomain, Timer
from mwcore.runtime.timers import TimerEntry, TimerQueue
from mwcore.serde.avro import AvroSerde, SchemaRegistry


class Produced(NamedTuple):
    """A production, decoded."""

    key: str
    value: Any
    timestamp: int
    id: bytes


@dataclass(frozen=True)
class Failure:
    """A record or timer whose processing raised (the runtime dead-letters it)."""

    key: str
    cause: str  # "record" or "timer:<tag>"
    timestamp: int
    error: BaseException


def find_schemas(start: Path | None = None) -> Path:
    """The nearest ``schemas/`` directory at or above ``start`` (default: cwd)."""
    base = (start or Path.cwd()).resolve()
    for d in (base, *base.parents):
        if (d / "schemas").is_dir():
            return d / "schemas"
    raise FileNotFoundError(f"no schemas/ directory at or above {base}")


class Harness:
    """One computation, all keys, in memory. ``raise_errors=False`` records failures
    (as the runtime's dead letters) instead of raising them."""

    def __init__(
        self,
        computation: Computation | type[Computation],
        registry: SchemaRegistry | None = None,
        *,
        wall_ms: int = 0,
        raise_errors: bool = True,
    ) -> None:
        comp = computation() if isinstance(computation, type) else computation
        comp.validate()
        self.comp = comp
        self.registry = registry or SchemaRegistry.from_directory(find_schemas())
        self.codec = comp.state
        self.codec.bind(self.registry)
        self._inputs = {i.stream: (i, AvroSerde(self.registry, i.schema or "")) for i in comp.inputs}
        self._outputs = {o.stream: AvroSerde(self.registry, o.schema) for o in comp.outputs}
        encoders: dict[str, tuple[str, Encoder]] = {s: (s, d.encode) for s, d in self._outputs.items()}
        self.ctx = Context(encoders, self._load_state, lambda: self.wall_ms)
        self.wall_ms = wall_ms
        self.watermark = MIN_WATERMARK
        self.raise_errors = raise_errors
        self.timers = TimerQueue()
        self.failures: list[Failure] = []
        self._state: dict[str, bytes] = {}  # encoded, as committed
        self._produced: list[tuple[str, Produced]] = []
        self._offsets = itertools.count()

    # -- input ---------------------------------------------------------------------------

    def send(
        self,
        stream: str,
        value: Any,
        timestamp: int,
        key: str | None = None,
        record_id: bytes | None = None,
        *,
        decoded: bool = False,
    ) -> None:
        """Process one record of input ``stream`` (keyed by the input's key extractor,
        else by ``key``). Event-time timers fire only on ``advance_watermark``. The value
        goes through an Avro round trip unless ``decoded`` says it came from Avro."""
        try:
            inp, serde = self._inputs[stream]
        except KeyError:
            raise KeyError(f"{stream!r} is not an input of {self.comp.name}") from None
        if not decoded:
            value = serde.decode(serde.encode(value))  # what a worker would hand over
        decoded_value = value
        if inp.key is not None:
            key = inp.key(decoded_value)
        if key is None:
            raise ValueError(f"a record of {stream!r} needs a key (its input has no key extractor)")
        rid = record_id or ids.random_id()
        record = Record(key, decoded_value, timestamp, rid, stream, 0, next(self._offsets))
        self.ctx.begin(key, rid, timestamp)
        try:
            self.comp.process_record(self.ctx, record)
        except Exception as exc:
            self._fail(Failure(key, "record", timestamp, exc))
            return
        self._apply(key, self.ctx.effects())

    def advance_watermark(self, watermark: int) -> int:
        """Fire every event-time timer below ``watermark``, oldest first (those the
        callbacks set below it too); the number fired."""
        self.watermark = max(self.watermark, watermark)
        return self._fire(TimeDomain.EVENT, watermark)

    def advance_wall(self, ms: int) -> int:
        """Move the wall clock forward by ``ms`` and fire the wall-time timers due."""
        self.wall_ms += ms
        return self._fire(TimeDomain.WALL, self.wall_ms + 1)

    def finish(self) -> int:
        """The end of input: the watermark goes to the end of time."""
        from mwcore.api.clock import MAX_WATERMARK

        return self.advance_watermark(MAX_WATERMARK)

    # -- what happened -------------------------------------------------------------------

    def output(self, stream: str) -> list[Produced]:
        if stream not in self._outputs:
            raise KeyError(f"{stream!r} is not an output of {self.comp.name}")
        return [p for s, p in self._produced if s == stream]

    def values(self, stream: str) -> list[Any]:
        return [p.value for p in self.output(stream)]

    def state(self, key: str) -> Any:
        raw = self._state.get(key)
        return None if raw is None else self.codec.decode(raw)

    def keys(self) -> list[str]:
        return sorted(self._state)

    def pending_timers(self) -> int:
        return len(self.timers)

    # -- the runtime's rules -------------------------------------------------------------

    def _load_state(self, key: str) -> Any:
        return self.state(key)

    def _fire(self, domain: TimeDomain, limit: int) -> int:
        fired = 0
        for entry in self.timers.due(domain, limit):  # those set while firing come out too
            fired += 1
            fid = ids.timer_firing_id(entry.set_id, entry.tag, entry.timestamp)
            self.ctx.begin(entry.key, fid, entry.timestamp)
            try:
                self.comp.process_timer(self.ctx, Timer(entry.key, entry.tag, entry.timestamp, domain))
            except Exception as exc:
                self._fail(Failure(entry.key, f"timer:{entry.tag}", entry.timestamp, exc))
                continue
            self._apply(entry.key, self.ctx.effects())
        return fired

    def _fail(self, failure: Failure) -> None:
        if self.raise_errors:
            raise failure.error
        self.failures.append(failure)

    def _apply(self, key: str, eff: Effects) -> None:
        if eff.state_changed:
            if eff.state is None:
                self._state.pop(key, None)
            else:
                self._state[key] = self.codec.encode(eff.state)
        for op in eff.timer_ops:
            if op.timestamp is None:
                self.timers.clear(key, op.tag)
            else:
                self.timers.set(TimerEntry(key, op.tag, op.timestamp, op.domain, op.set_id))
        for p in eff.productions:
            stream = p.topic  # the harness's encoders name topics by stream
            value = self._outputs[stream].decode(p.value)
            self._produced.append((stream, Produced((p.key or b"").decode(), value, p.timestamp, p.id)))


def example_value(registry: SchemaRegistry, schema: str) -> Any:
    """A valid value of the named Avro record schema (zeros, empty strings, the first
    enum symbol, the first branch of a union, field defaults where given): a starting
    point for a test's input."""
    named: dict[str, Any] = {}

    def make(t: Any, ns: str) -> Any:
        if isinstance(t, list):
            return make(t[0], ns)
        if isinstance(t, str):
            full = t if "." in t else f"{ns}.{t}" if ns else t
            if full in named or t in named:
                return make(named.get(full, named.get(t)), ns)
            return {
                "null": None,
                "boolean": False,
                "int": 0,
                "long": 0,
                "float": 0.0,
                "double": 0.0,
                "bytes": b"",
                "string": "",
            }[t]
        kind = t["type"]
        if kind in ("record", "enum", "fixed"):
            space = t.get("namespace", ns)
            named[f"{space}.{t['name']}" if space else t["name"]] = t
        if kind == "record":
            space = t.get("namespace", ns)
            return {
                f["name"]: f["default"] if "default" in f else make(f["type"], space) for f in t["fields"]
            }
        if kind == "enum":
            return t["symbols"][0]
        if kind == "fixed":
            return bytes(t["size"])
        if kind == "array":
            return []
        if kind == "map":
            return {}
        return make(kind, ns)

    return make(registry.latest(schema).parsed, "")
