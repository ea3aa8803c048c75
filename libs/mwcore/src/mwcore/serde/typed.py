"""Typed records: a stream's values as dataclasses or pydantic models, not dicts.

``Input(..., type=Order)`` and ``Output(..., type=Total)`` name the type a stream's
values take in user code. The type is checked against the stream's Avro schema when
the worker (or the harness) starts (``check``): every field of the schema is a field
of the type, with a type that holds what Avro reads (nested records are dataclasses or
models too, arrays ``list[T]``, maps ``dict[str, T]``, a union with ``null``
``T | None``, an enum ``str``); a mismatch is a ``ConfigError`` of one line, naming the
field (a worker exits 2).

Decoding makes the value the codec decoded into the type (``reader``). A plain
dataclass (no ``__slots__``, no ``__post_init__``) adopts the decoded dict as its
``__dict__``: no copy, no ``__init__``; the nested records in it are made the same
way. Other dataclasses are called with the fields; pydantic models validate the dict.
Encoding takes an instance back to what the codec writes (``plain``); a dict is
written as it is, so dict productions keep working on a typed output.

On the native core (``record_types.classes``), a plan whose records are all plain dataclasses
names their classes: Rust makes each record's instance around the dict it decodes,
and writes an instance of the class from its ``__dict__``, with no Python call.

Types are checked, not generated from the schema: the schema stays the contract other
tools read, and the user's type is theirs (methods, defaults, validators).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from mwcore.errors import ConfigError, SerializationError
from mwcore.serde.record_types import (
    fields_of,
    has_default,
    is_model,
    is_record_type,
    plain_dataclass,
    split_optional,
)

Convert = Callable[[Any], Any]

_PRIMITIVE: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (float,),
    "double": (float,),
    "bytes": (bytes,),
    "string": (str,),
    "fixed": (bytes,),
    "enum": (str,),
}
_LOGICAL: dict[str, tuple[type, ...]] = {
    "timestamp-millis": (datetime.datetime,),
    "timestamp-micros": (datetime.datetime,),
    "local-timestamp-millis": (datetime.datetime,),
    "local-timestamp-micros": (datetime.datetime,),
    "date": (datetime.date,),
    "time-millis": (datetime.time,),
    "time-micros": (datetime.time,),
    "decimal": (decimal.Decimal,),
    "uuid": (uuid.UUID,),
}


def _named(parsed: Any) -> dict[str, Any]:
    """Full name -> definition of every named type in a parsed schema."""
    out: dict[str, Any] = {}
    if isinstance(parsed, dict):
        out.update(parsed.get("__named_schemas", {}))

    def walk(s: Any) -> None:
        if isinstance(s, list):
            for branch in s:
                walk(branch)
        elif isinstance(s, dict):
            if s.get("type") in ("record", "error", "enum", "fixed") and "name" in s:
                out.setdefault(s["name"], s)
            for f in s.get("fields", ()):
                walk(f["type"])
            for key in ("items", "values"):
                if key in s:
                    walk(s[key])

    walk(parsed)
    return out


class Typed(NamedTuple):
    """A stream's type, checked against its schema (``check``)."""

    type: type
    read: Convert  # decoded dict -> the type
    write: Convert  # the type (or a dict) -> what the codec writes


class _Mismatch(Exception):
    pass


class _Checker:
    """Walks a schema and a type together; builds the converters both ways."""

    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named
        self.walking: set[str] = set()  # the records being walked (a recursive one is refused)

    def resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema in self.named:
            return self.named[schema]
        if isinstance(schema, dict) and schema.get("type") in self.named and len(schema) == 1:
            return self.named[schema["type"]]
        return schema

    def convert(self, schema: Any, tp: Any, where: str) -> tuple[Convert | None, Convert | None]:
        """(decoded -> typed, typed -> encodable) for values of ``schema`` as ``tp``; None
        where a value passes as it is. Raises _Mismatch naming ``where``."""
        if tp is Any or tp is object:
            return None, None
        schema = self.resolve(schema)
        inner, optional = split_optional(tp)
        if isinstance(schema, list):  # a union
            branches = [self.resolve(b) for b in schema]
            nullable = "null" in branches
            rest = [b for b in branches if b != "null"]
            if len(rest) != 1:
                if not nullable and not rest:
                    return None, None
                raise _Mismatch(f"{where}: a union of {len(rest)} types; declare it Any")
            if nullable and not optional:
                raise _Mismatch(
                    f"{where}: the schema allows null, the type {_name(tp)} does not (use T | None)"
                )
            if not nullable and optional:
                raise _Mismatch(f"{where}: the type allows None, the schema does not")
            read, write = self.convert(rest[0], inner, where)
            return _skip_none(read), _skip_none(write)
        if schema == "null":
            if tp is not type(None) and not optional:
                raise _Mismatch(f"{where}: the schema is null, the type {_name(tp)}")
            return None, None
        if optional:
            raise _Mismatch(f"{where}: the type allows None, the schema does not")
        kind = schema.get("type") if isinstance(schema, dict) else schema
        logical = schema.get("logicalType") if isinstance(schema, dict) else None
        if logical in _LOGICAL:
            return self._leaf(_LOGICAL[logical], inner, where, f"{kind} ({logical})")
        if kind in ("record", "error"):
            return self._record(schema, inner, where)
        if kind == "array":
            return self._array(schema["items"], inner, where)
        if kind == "map":
            return self._map(schema["values"], inner, where)
        if kind in _PRIMITIVE:
            symbols = schema.get("symbols", ()) if isinstance(schema, dict) else ()
            return self._leaf(_PRIMITIVE[kind], inner, where, kind, symbols)
        raise _Mismatch(f"{where}: schema type {kind!r} is not covered; declare it Any")

    def _leaf(
        self, allowed: tuple[type, ...], tp: Any, where: str, kind: str, symbols: Sequence[str] = ()
    ) -> tuple[None, None]:
        base = typing.get_origin(tp) or tp
        if base is typing.Literal:  # an enum's: every symbol in it
            values = typing.get_args(tp)
            ok = all(type(v) in allowed for v in values) and set(symbols) <= set(values)
        else:  # exactly what Avro decodes (an enum class, a bool for an int, ... are not)
            ok = base in allowed
        if not ok:
            raise _Mismatch(f"{where}: the schema's {kind} is not a {_name(tp)}")
        return None, None

    def _array(self, items: Any, tp: Any, where: str) -> tuple[Convert | None, Convert | None]:
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (list, Sequence, typing.Sequence) and len(args) == 1:  # decoded as a list
            item = args[0]
        elif tp in (list, Sequence):
            item = Any
        else:
            raise _Mismatch(f"{where}: the schema's array is not a {_name(tp)} (use list[T])")
        read, write = self.convert(items, item, f"{where}[]")
        return (
            None if read is None else (lambda v, r=read: [r(x) for x in v]),
            None if write is None else (lambda v, w=write: [w(x) for x in v]),
        )

    def _map(self, values: Any, tp: Any, where: str) -> tuple[Convert | None, Convert | None]:
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (dict, Mapping, typing.Mapping) and len(args) == 2 and args[0] is str:
            value = args[1]
        elif tp in (dict, Mapping):
            value = Any
        else:
            raise _Mismatch(f"{where}: the schema's map is not a {_name(tp)} (use dict[str, T])")
        read, write = self.convert(values, value, f"{where}{{}}")
        return (
            None if read is None else (lambda v, r=read: {k: r(x) for k, x in v.items()}),
            None if write is None else (lambda v, w=write: {k: w(x) for k, x in v.items()}),
        )

    def _record(self, schema: dict[str, Any], tp: Any, where: str) -> tuple[Convert, Convert]:
        if not is_record_type(tp):
            raise _Mismatch(f"{where}: the schema's record {schema['name']} is not a {_name(tp)}")
        if schema["name"] in self.walking:
            raise _Mismatch(f"{where}: the record {schema['name']} is recursive: declare the field Any")
        self.walking.add(schema["name"])
        try:
            return self._fields_of(schema, tp, where)
        finally:
            self.walking.discard(schema["name"])

    def _fields_of(self, schema: dict[str, Any], tp: Any, where: str) -> tuple[Convert, Convert]:
        try:
            fields = fields_of(tp)
        except Exception as exc:  # an annotation that does not resolve (NameError)
            raise _Mismatch(f"{where}: the annotations of {tp.__name__} do not resolve: {exc}") from None
        names = [f["name"] for f in schema["fields"]]
        extra = [n for n in fields if n not in names]
        missing = [n for n in names if n not in fields]
        if missing:
            raise _Mismatch(f"{where}: {tp.__name__} has no field {missing[0]!r} of {schema['name']}")
        if extra and not all(has_default(tp, n) for n in extra):
            n = next(n for n in extra if not has_default(tp, n))
            raise _Mismatch(f"{where}: {tp.__name__}.{n} is not a field of {schema['name']}")
        nested: dict[str, tuple[Convert | None, Convert | None]] = {}
        for f in schema["fields"]:
            name = f["name"]
            conv = self.convert(f["type"], fields[name], f"{where}.{name}")
            if conv != (None, None):
                nested[name] = conv
        reads = {n: r for n, (r, _) in nested.items() if r is not None}
        writes = {n: w for n, (_, w) in nested.items() if w is not None}
        # fields beyond the schema take their defaults: made by the type's __init__
        return _reader(tp, reads, around=not extra), _writer(tp, names, writes)


def _skip_none(conv: Convert | None) -> Convert | None:
    if conv is None:
        return None

    def skip(v: Any) -> Any:
        return None if v is None else conv(v)

    return skip


def _reader(tp: type, nested: dict[str, Convert], around: bool = True) -> Convert:
    """decoded dict -> ``tp`` (what the type refuses, or anything that is no record of
    it: a ``SerializationError``, which makes the record a dead letter as a value that
    does not decode does). The dict is the decoder's own, made for this value."""
    items = tuple(nested.items())
    if around and plain_dataclass(tp):
        new, put = object.__new__, object.__setattr__  # put: past a frozen one's __setattr__

        def make(d: dict[str, Any]) -> Any:
            for name, conv in items:
                d[name] = conv(d[name])
            obj: Any = new(tp)
            put(obj, "__dict__", d)
            return obj

    elif is_model(tp):
        make = tp.model_validate  # type: ignore[attr-defined]
    else:  # its __init__ with the fields it takes, the others set after (init=False)
        init = {f.name for f in dataclasses.fields(tp) if f.init}

        def make(d: dict[str, Any]) -> Any:
            for name, conv in items:
                d[name] = conv(d[name])
            obj = tp(**{k: v for k, v in d.items() if k in init})
            for k, v in d.items():
                if k not in init:
                    object.__setattr__(obj, k, v)
            return obj

    def refused(d: dict[str, Any]) -> Any:
        try:
            return make(d)
        except Exception as exc:
            raise SerializationError(f"{tp.__name__} refuses it: {exc}".splitlines()[0]) from exc

    return refused


def _writer(tp: type, names: list[str], nested: dict[str, Convert]) -> Convert:
    """``tp`` (or a dict: its nested values of their types too) -> a dict the codec
    writes."""
    if is_model(tp):  # model_dump takes the nested ones too
        return plain
    items = tuple(nested.items())
    plain_dc = plain_dataclass(tp) and not items

    def write(v: Any) -> Any:
        if isinstance(v, dict):
            if not items:
                return v
            d = dict(v)
            for name, conv in items:
                if name in d:
                    d[name] = conv(d[name])
            return d
        if plain_dc and type(v) is tp:
            return v.__dict__
        d = {n: getattr(v, n) for n in names}
        for name, conv in items:
            d[name] = conv(d[name])
        return d

    return write


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def check(tp: type, parsed: Any, what: str) -> Typed:
    """``tp`` for a stream of ``parsed`` (a parsed Avro record schema), with its
    converters; ``ConfigError`` (one line, starting with ``what``) if they differ."""
    if not is_record_type(tp):
        raise ConfigError(f"{what}: type={_name(tp)} is not a dataclass or a pydantic model")
    try:
        read, write = _Checker(_named(parsed)).convert(parsed, tp, tp.__name__)
    except _Mismatch as exc:
        raise ConfigError(
            f"{what}: type {tp.__name__} does not match schema {parsed.get('name')}: {exc}"
        ) from None
    assert read is not None and write is not None
    return Typed(tp, read, write)


def decoding(decode: Callable[[bytes], Any], read: Convert) -> Callable[[bytes], Any]:
    """``decode``, its value made the stream's type."""

    def typed(data: bytes) -> Any:
        return read(decode(data))

    return typed


def encoding(encode: Callable[[Any], bytes], write: Convert) -> Callable[[Any], bytes]:
    """``encode``, taking the stream's type (or a dict)."""

    def typed(value: Any) -> bytes:
        return encode(write(value))

    return typed


def plain(value: Any) -> Any:
    """Any record value back to what Avro writes (for a dead letter's copy): dicts as
    they are, dataclasses and models as dicts."""
    if isinstance(value, dict):
        return value
    if is_model(type(value)):
        return value.model_dump()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value
