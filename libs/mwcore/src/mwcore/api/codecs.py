"""State codecs: how a computation's per-key state is stored in Redis. Never pickle."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import orjson

from mwcore.errors import ConfigError, SerializationError
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.record_types import is_model

T = TypeVar("T")

# One encoder for all: json.dumps with non-default separators builds a new one per call.
_JSON = json.JSONEncoder(separators=(",", ":"))
# orjson writes what the standard library would, ten times faster, with three gaps the
# codec closes by falling back to the standard library: it refuses integers beyond 64
# bits (encode), writes NaN and infinities as null (encode: output with a null is
# written again by the standard library, which keeps them), and reads integers beyond
# 64 bits as floats (decode: a run of 19 or more digits is read by the standard library).
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_LONG_DIGITS = re.compile(rb"\d{19}")


class StateCodec(Protocol[T]):
    """Turns a key's state into bytes and back. ``bind`` is called once by the runtime."""

    def bind(self, registry: SchemaRegistry) -> None: ...

    def encode(self, value: T) -> bytes: ...

    def decode(self, data: bytes) -> T: ...


class JsonCodec(Generic[T]):
    """JSON for plain values: numbers, strings, lists and dicts of them."""

    def bind(self, registry: SchemaRegistry) -> None:
        return None

    def first_try(self) -> tuple[Callable[..., bytes], int]:
        """``(orjson.dumps, option)``: what ``encode`` tries first. Its output stands
        unless it raised or wrote ``null``; then ``encode`` decides. (The native core calls
        it without the frame of ``encode``, for a batch's dirty keys.)"""
        return orjson.dumps, _ORJSON_OPTIONS

    def encode(self, value: T) -> bytes:
        try:
            out = orjson.dumps(value, option=_ORJSON_OPTIONS)
            if out.find(b"null") < 0:  # (`in` on bytes first tries an int, and raises)
                return out
        except TypeError:
            pass  # beyond orjson (a big integer), or not JSON at all: the standard library says
        try:
            return _JSON.encode(value).encode()
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"state is not JSON-serialisable: {exc}") from exc

    def decode(self, data: bytes) -> T:
        if _LONG_DIGITS.search(data) is None:
            try:
                fast: T = orjson.loads(data)
                return fast
            except orjson.JSONDecodeError:
                pass  # NaN or Infinity, which the standard library writes and reads
        result: T = json.loads(data)
        return result


class DataclassCodec(Generic[T]):
    """A flat dataclass of JSON-compatible fields, stored as a JSON object."""

    def __init__(self, cls: type[T]) -> None:
        if not dataclasses.is_dataclass(cls):
            raise ConfigError(f"DataclassCodec needs a dataclass, got {cls!r}")
        self._cls = cls
        self._fields = tuple(f.name for f in dataclasses.fields(cls))

    def bind(self, registry: SchemaRegistry) -> None:
        return None

    def encode(self, value: T) -> bytes:
        _must_be(value, self._cls)
        try:
            return _JSON.encode({name: getattr(value, name) for name in self._fields}).encode()
        except TypeError as exc:
            raise SerializationError(f"state is not JSON-serialisable: {exc}") from exc

    def decode(self, data: bytes) -> T:
        return self._cls(**json.loads(data))


class PydanticCodec(Generic[T]):
    """A pydantic model, stored as its JSON (``model_dump_json``), read back validated."""

    def __init__(self, cls: type[T]) -> None:
        if not is_model(cls):
            raise ConfigError(f"PydanticCodec needs a pydantic model, got {cls!r}")
        self._cls: Any = cls

    def bind(self, registry: SchemaRegistry) -> None:
        return None

    def encode(self, value: T) -> bytes:
        _must_be(value, self._cls)
        model: Any = value
        try:
            out: bytes = model.model_dump_json().encode()
        except ValueError as exc:  # (pydantic's serialization errors are ValueErrors)
            raise SerializationError(f"state cannot be written as JSON: {exc}") from exc
        return out

    def decode(self, data: bytes) -> T:
        value: T = self._cls.model_validate_json(data)
        return value


def _must_be(value: object, cls: type[Any]) -> None:
    if not isinstance(value, cls):
        raise SerializationError(f"state must be a {cls.__name__}, got {type(value)}")


def codec_for(state_type: Any) -> StateCodec[Any]:
    """The codec a state of ``state_type`` is stored with (``Computation[S]``'s ``S``): a
    dataclass's ``DataclassCodec``, a pydantic model's ``PydanticCodec``, and ``JsonCodec``
    for anything else (numbers, strings, lists and dicts of them, ``Any``, or no type)."""
    if isinstance(state_type, type) and dataclasses.is_dataclass(state_type):
        return DataclassCodec(state_type)
    if is_model(state_type):
        return PydanticCodec(state_type)
    return JsonCodec()


class AvroCodec:
    """State as an Avro record of a schema from the registry (single-object encoded)."""

    def __init__(self, schema: str) -> None:
        self._schema = schema
        self._serde: AvroSerde | None = None

    @property
    def schema(self) -> str:
        """The Avro schema the state is written with (the runtime publishes it)."""
        return self._schema

    def bind(self, registry: SchemaRegistry) -> None:
        self._serde = AvroSerde(registry, self._schema)

    def _bound(self) -> AvroSerde:
        if self._serde is None:
            raise ConfigError(f"AvroCodec({self._schema!r}) used before the runtime bound it")
        return self._serde

    def encode(self, value: Any) -> bytes:
        return self._bound().encode(value)

    def decode(self, data: bytes) -> Any:
        return self._bound().decode(data)
