"""The computation API: what a user subclasses and declares.

A computation is pure: ``process_record`` and ``process_timer`` read and write the
current key's state, set and clear timers, and produce records, all through the
context, which only records what was asked. The runtime commits it.

A computation is generic in its state type: ``Computation[S]`` hands its calls a
``Context[S]``, so mypy checks ``ctx.state.get()`` (``S | None``) and
``ctx.state.set(...)`` in user code. The state's codec follows from ``S``
(``codecs.codec_for``: a dataclass or a pydantic model as a JSON object, anything else
as JSON); ``state_codec`` names another (``AvroCodec``). The older declaration, a codec
in the class attribute ``state`` (a ``ClassVar``, which cannot hold a type variable),
still works and warns (``DeprecationWarning``).

Example::

    class RunningSum(Computation[int]):
        name = "running_sum"
        inputs = (Input("numbers", schema="mw.examples.Number"),)
        outputs = (Output("sums", schema="mw.examples.Sum"),)

        def process_record(self, ctx: Context[int], record: Record) -> None:
            total = ctx.state.get(0) + record.value["n"]
            ctx.state.set(total)
            ctx.produce("sums", {"key": ctx.key, "total": total}, record.timestamp)
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar, get_args, get_origin

from mwcore.api.codecs import StateCodec, codec_for
from mwcore.api.record import Record, Timer
from mwcore.errors import ConfigError
from mwcore.serde.framing import Wire, check_wire
from mwcore.serde.record_types import is_record_type

if TYPE_CHECKING:
    from mwcore.api.context import Context

KeyExtractor = Callable[[Any], str]
S = TypeVar("S")
_NAME = re.compile(r"^[a-z][a-z0-9_\-]{0,62}$")


@dataclass(frozen=True)
class Input:
    """An input stream.

    ``key=None`` keys records by the stream's own key (its partitioning). A key
    extractor (a function of the decoded value) re-keys the stream: the runtime
    adds one hop through a repartition topic so every key has one owner.
    ``schema`` is the reader schema (required). ``wire`` is the framing its values
    come in (``serde/framing.py``: ``"confluent"`` or ``"single-object"``; None: the
    process's ``MW_WIRE``); ``read_also`` the other one, taken too during a migration
    (None: ``MW_WIRE_READ_ALSO``). ``type``: a dataclass or pydantic model the values
    are decoded into (``serde/typed.py``: checked against the schema at start); None:
    dicts.
    """

    stream: str
    schema: str | None = None
    key: KeyExtractor | None = None
    # False: a side input (e.g. model updates published now and then) that does not
    # hold this computation's watermark; its records apply whenever they arrive.
    watermark: bool = True
    wire: Wire | None = None
    read_also: Wire | None = None
    type: type[Any] | None = None


@dataclass(frozen=True)
class Output:
    """An output stream and the Avro schema its values are written with, in the framing
    ``wire`` (None: the process's ``MW_WIRE``). ``type``: the dataclass or pydantic model
    user code produces (dicts are taken too), checked against the schema at start."""

    stream: str
    schema: str
    partitions: int | None = None  # None: the computation's partition count
    wire: Wire | None = None
    type: type[Any] | None = None


@dataclass(frozen=True)
class Options:
    """Delivery options.

    ``productions="weak"`` sends productions before the checkpoint (lower latency, for
    idempotent code); those not yet acknowledged when the batch commits are
    checkpointed with it. ``"strong"`` checkpoints them first and sends them after.
    ``"transactional"`` checkpoints them first and sends each checkpoint's in a Kafka
    transaction with its commit witness: a ``read_committed`` reader outside the kit
    sees each production once, even across crashes (``runtime/transactional.py``).
    ``exactly_once=False`` skips record-id deduplication (at-least-once for inputs
    re-sent upstream).
    """

    exactly_once: bool = True
    productions: Literal["strong", "weak", "transactional"] = "strong"
    start_from: Literal["earliest", "latest"] = "earliest"
    # Records an injector let through behind its watermark: "route" sends them, as
    # they came, to ``<name>.late`` (header mw-late-ms: how late); "drop" only counts.
    late: Literal["route", "drop"] = "route"


class Computation(Generic[S]):
    """Subclass as ``Computation[S]`` (``S``: the per-key state's type), declare the
    class attributes, implement the two process methods."""

    name: ClassVar[str]
    inputs: ClassVar[tuple[Input, ...]]
    outputs: ClassVar[tuple[Output, ...]] = ()
    # None: the codec follows from S (``codecs.codec_for``); else this one (AvroCodec)
    state_codec: ClassVar[StateCodec[Any] | None] = None
    options: ClassVar[Options] = Options()
    partitions: ClassVar[int] = 4  # key intervals, when the runtime creates the inputs

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        old = cls.__dict__.get("state")
        if old is not None and _is_codec(old):
            warnings.warn(
                f"{cls.__qualname__}.state = {type(old).__name__}(...) is deprecated: declare the state's "
                f"type instead, class {cls.__qualname__}(Computation[YourState]) (its codec follows "
                "from the type), or another codec in `state_codec`",
                DeprecationWarning,
                stacklevel=2,
            )

    def process_record(self, ctx: Context[S], record: Record) -> None:
        raise NotImplementedError

    def process_timer(self, ctx: Context[S], timer: Timer) -> None:
        return None

    @classmethod
    def validate(cls) -> None:
        """Raise ConfigError naming what is wrong with the declaration."""
        where = f"{cls.__module__}.{cls.__qualname__}"
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"{where}: name must match {_NAME.pattern}, got {name!r}")
        inputs = getattr(cls, "inputs", ())
        if not inputs:
            raise ConfigError(f"{where}: declare at least one Input in `inputs`")
        for inp in inputs:
            if inp.schema is None:
                raise ConfigError(f"{where}: input {inp.stream!r} needs schema=<Avro full name>")
        streams = [i.stream for i in inputs]
        if len(set(streams)) != len(streams):
            raise ConfigError(f"{where}: an input stream is declared twice: {streams}")
        outs = [o.stream for o in cls.outputs]
        if len(set(outs)) != len(outs):
            raise ConfigError(f"{where}: an output stream is declared twice: {outs}")
        for stream in (*inputs, *cls.outputs):
            for attr in ("wire", "read_also"):
                value = getattr(stream, attr, None)
                if value is not None:
                    try:
                        check_wire(value, f"{where}: {stream.stream!r} {attr}")
                    except ValueError as exc:
                        raise ConfigError(str(exc)) from None
        for stream in (*inputs, *cls.outputs):
            if stream.type is not None and not is_record_type(stream.type):
                raise ConfigError(
                    f"{where}: {stream.stream!r} type={stream.type!r} is not a dataclass or a pydantic model"
                )
        if cls.options.productions not in ("strong", "weak", "transactional"):
            raise ConfigError(f"{where}: options.productions must be 'strong', 'weak' or 'transactional'")
        if cls.options.late not in ("route", "drop"):
            raise ConfigError(f"{where}: options.late must be 'route' or 'drop'")
        if cls.partitions < 1:
            raise ConfigError(f"{where}: partitions must be at least 1")


def load_computation(spec: str) -> type[Computation[Any]]:
    """``package.module:ClassName`` -> the class (validated), with a clear error if it is not one."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{spec!r}: expected module:Class, e.g. mwcore.examples.running_sum:RunningSum")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name}: {exc}") from exc
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Computation)):
        raise ConfigError(f"{spec!r} is not a Computation subclass")
    cls.validate()
    return cls


def _is_codec(value: object) -> bool:
    return all(callable(getattr(value, m, None)) for m in ("bind", "encode", "decode"))


def state_type(cls: type[Computation[Any]]) -> Any:
    """The ``S`` of ``cls``'s ``Computation[S]`` (found along its bases), or None."""
    for klass in cls.__mro__:
        for base in klass.__dict__.get("__orig_bases__", ()):
            origin = get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Computation):
                (arg,) = get_args(base)[:1] or (None,)
                if arg is not None and not isinstance(arg, TypeVar):
                    return arg
    return None


_CODECS: dict[type[Any], StateCodec[Any]] = {}


def state_codec_of(cls: type[Computation[Any]] | Computation[Any]) -> StateCodec[Any]:
    """The codec of ``cls``'s state, one per class: ``state_codec`` if set, else the
    deprecated ``state`` attribute's, else the one ``S`` calls for (JSON without ``S``)."""
    klass = cls if isinstance(cls, type) else type(cls)
    codec = _CODECS.get(klass)
    if codec is None:
        old = getattr(klass, "state", None)
        if klass.state_codec is not None:
            codec = klass.state_codec
        elif old is not None and _is_codec(old):
            codec = old
        else:
            codec = codec_for(state_type(klass))
        _CODECS[klass] = codec
    return codec
