"""The context handed to user code: it records effects and performs no I/O.

One ``Context`` serves a whole key interval; the runtime points it at the current
key and cause before each call (``begin``) and takes what was recorded afterwards
(``effects``). If user code raises, the runtime discards the effects, so a failed
record leaves no trace but its dead letter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from mwcore.api import headers as user_headers
from mwcore.api import ids
from mwcore.api.headers import HeadersIn
from mwcore.api.record import Production, TimeDomain

S = TypeVar("S")  # a computation's state type (``Computation[S]``)
UNSET: Any = object()
_tuple_new = tuple.__new__  # builds a NamedTuple without its Python-level __new__
# Kafka's default message.max.bytes is about 1 MB; leave room for key and headers.
MAX_VALUE_BYTES = 900_000
TIMER_INDEX = 0x8000_0000  # a timer's set id is derived from its cause at this index on


def undeclared(stream: object, encoders: Mapping[str, object]) -> KeyError:
    """The error of a production to an output the computation does not declare."""
    return KeyError(f"{stream!r} is not a declared output (declared: {', '.join(sorted(encoders))})")


def too_large(stream: object, size: int) -> ValueError:
    """The error of a production whose value is over ``MAX_VALUE_BYTES``."""
    return ValueError(f"production to {stream!r} is {size} bytes (limit {MAX_VALUE_BYTES})")


def set_none() -> ValueError:
    """The error of ``state.set(None)``."""
    return ValueError("state.set(None): use state.clear() to delete a key's state")


@dataclass(slots=True)
class TimerOp:
    """Set (``timestamp`` given) or clear (``timestamp`` None) the key's timer ``tag``."""

    tag: str
    timestamp: int | None
    domain: TimeDomain
    set_id: bytes


class Effects:
    """What one call of user code asked for (made per call, so kept cheap)."""

    __slots__ = ("late_productions", "productions", "state", "timer_ops")

    def __init__(self) -> None:
        self.state: Any = UNSET  # UNSET: untouched; None: cleared; else the new value
        self.timer_ops: list[TimerOp] = []
        self.productions: list[Production] = []
        self.late_productions = 0

    @property
    def state_changed(self) -> bool:
        return self.state is not UNSET


Encoder = Callable[[Any], bytes]


class StateHandle(Generic[S]):
    """Read and write the current key's state (of type ``S``: mypy checks ``get`` and
    ``set`` against the computation's ``Computation[S]``)."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Context[S]) -> None:
        self._ctx = ctx

    @overload
    def get(self) -> S | None: ...

    @overload
    def get(self, default: S) -> S: ...

    def get(self, default: S | None = None) -> S | None:
        """The key's state, or ``default`` where it has none."""
        eff = self._ctx._effects
        if eff.state is not UNSET:
            return default if eff.state is None else eff.state
        value = self._ctx._load_state(self._ctx.key)
        return default if value is None else value

    def set(self, value: S) -> None:
        if value is None:
            raise set_none()
        self._ctx._effects.state = value

    def clear(self) -> None:
        self._ctx._effects.state = None


class TimerHandle:
    """Set and clear the current key's timers, by tag."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Context[Any]) -> None:
        self._ctx = ctx

    def set(self, tag: str, timestamp: int, domain: TimeDomain = TimeDomain.EVENT) -> None:
        """Fire ``process_timer`` for this key at ``timestamp``; replaces a timer of the same tag."""
        ctx = self._ctx
        eff = ctx._effects
        set_id = ids.derive(ctx._cause, TIMER_INDEX + len(eff.timer_ops))
        eff.timer_ops.append(TimerOp(tag, int(timestamp), domain, set_id))

    def clear(self, tag: str) -> None:
        ctx = self._ctx
        ctx._effects.timer_ops.append(TimerOp(tag, None, TimeDomain.EVENT, b""))


class Context(Generic[S]):
    """What ``process_record`` and ``process_timer`` get: key, state (of type ``S``),
    timers, produce."""

    __slots__ = (
        "_cause",
        "_cause_ts",
        "_clock",
        "_effects",
        "_encoders",
        "_load_state",
        "key",
        "state",
        "timers",
    )

    def __init__(
        self,
        encoders: dict[str, tuple[str, Encoder]],
        load_state: Callable[[str], Any],
        clock: Callable[[], int],
    ) -> None:
        self.key = ""
        self._cause = b""
        self._cause_ts = 0
        self._effects = Effects()
        self._encoders = encoders  # stream -> (topic, encoder)
        self._load_state = load_state
        self._clock = clock
        self.state: StateHandle[S] = StateHandle(self)
        self.timers = TimerHandle(self)

    def begin(self, key: str, cause: bytes, cause_ts: int) -> None:
        self.key = key
        self._cause = cause
        self._cause_ts = cause_ts
        self._effects = Effects()

    def effects(self) -> Effects:
        return self._effects

    def now_ms(self) -> int:
        """Wall-clock time in ms from the runtime's clock (for wall-time timers).

        A worker reads the system clock. The engines without a broker keep a virtual
        one: the harness and the in-memory runner start it at their ``wall_ms`` (0) and
        move it with ``advance_wall``; ``mw batch`` and the Spark jobs leave it at 0, as
        their records' times, not a clock, drive them. Code that bounds something by the
        clock reads 0 as "no clock here" (the dip detector's model bound does).
        """
        return self._clock()

    def produce(
        self,
        stream: str,
        value: Any,
        timestamp: int,
        key: str | None = None,
        headers: HeadersIn | None = None,
    ) -> None:
        """Produce ``value`` to the output ``stream``, keyed by ``key`` (default: this key),
        with user ``headers`` (a mapping or ``(name, value)`` pairs, values bytes or str;
        ``mw-*`` names are the kit's: ``api/headers.py``).

        ``timestamp`` must not be older than the record or timer being processed; a
        violation is counted and logged by the runtime.
        """
        try:
            topic, encode = self._encoders[stream]
        except KeyError:
            raise undeclared(stream, self._encoders) from None
        encoded = encode(value)
        if len(encoded) > MAX_VALUE_BYTES:
            raise too_large(stream, len(encoded))
        own = () if headers is None else user_headers.to_send(headers)
        eff = self._effects
        if timestamp < self._cause_ts:
            eff.late_productions += 1
        out_key = self.key if key is None else key
        pid = ids.derive(self._cause, len(eff.productions))
        production: Production = _tuple_new(
            Production, (pid, topic, out_key.encode(), encoded, int(timestamp), own)
        )
        eff.productions.append(production)
