"""What Python type a record of a stream can be (``serde/typed.py``): a dataclass or a
pydantic model, its fields and their annotations, and which of them a decoder may make
around the dict it decodes without calling any of the type's code (``plain_dataclass``):
in Rust too, where the native codec's plan names their classes (``classes``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import pydantic


def is_record_type(tp: Any) -> bool:
    """A dataclass or a pydantic model (what a record schema maps to)."""
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or is_model(tp))


def is_model(tp: Any) -> bool:
    """A pydantic model class."""
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def plain_dataclass(tp: type) -> bool:
    """Made without its ``__init__``: an instance around the decoded dict. Not where the
    class or a base has ``__slots__`` (its slots would shadow the dict), runs code on
    making (``__post_init__``, a ``__new__`` or an ``__init__`` of its own) or validates
    (a pydantic dataclass)."""
    if not dataclasses.is_dataclass(tp) or hasattr(tp, "__pydantic_validator__"):
        return False
    if any("__slots__" in k.__dict__ for k in tp.__mro__[:-1]):
        return False
    init = getattr(tp, "__init__", None)
    generated = getattr(getattr(init, "__code__", None), "co_filename", "") == "<string>"
    return generated and not hasattr(tp, "__post_init__") and tp.__new__ is object.__new__


def fields_of(tp: type) -> dict[str, Any]:
    """Field name -> annotation (resolved) of a dataclass or pydantic model."""
    if is_model(tp):
        return {name: f.annotation for name, f in tp.model_fields.items()}  # type: ignore[attr-defined]
    hints = typing.get_type_hints(tp)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(tp)}


def has_default(tp: type, name: str) -> bool:
    if is_model(tp):
        return not tp.model_fields[name].is_required()  # type: ignore[attr-defined]
    f = next(f for f in dataclasses.fields(tp) if f.name == name)
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def split_optional(tp: Any) -> tuple[Any, bool]:
    """``T | None`` -> (T, True); anything else -> (itself, False)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) < len(args):
            return (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]), True  # noqa: UP007
    return tp, False


def classes(plan: Any, tp: Any) -> Any:
    """The native codec's plan (``serde/native_plan.py``) of a schema ``tp`` matches
    (``check``), its records naming their classes: ``("record", fields, cls)``; None
    unless every record type in it is a plain dataclass (Rust makes those alone)."""
    tp, _ = split_optional(tp)
    kind = plan[0]
    if tp is Any or tp is object:  # dicts, as the Python path leaves them
        return plan
    if kind == "union":
        inner = classes(plan[2], tp)
        return None if inner is None else ("union", plan[1], inner)
    if kind == "array":
        args = typing.get_args(tp)
        inner = classes(plan[1], args[0] if args else Any)
        return None if inner is None else ("array", inner, plan[2])
    if kind == "map":
        args = typing.get_args(tp)
        inner = classes(plan[1], args[1] if len(args) == 2 else Any)
        return None if inner is None else ("map", inner)
    if kind == "record":
        annotations = fields_of(tp)
        if not plain_dataclass(tp) or len(annotations) != len(plan[1]):  # (fields beyond the schema)
            return None
        fields = []
        for name, sub, nullable in plan[1]:
            inner = classes(sub, annotations[name])
            if inner is None:
                return None
            fields.append((name, inner, nullable))
        return ("record", tuple(fields), tp)
    return plan
