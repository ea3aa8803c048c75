"""The order the typed-record tests share: its Avro schema (t.Order, with a nested
record, an array, a map, an enum, optional fields), a dataclass and a pydantic model
that match it, a value of each, and ``order_with``, the dataclass with one field changed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from mwcore.serde.avro import SchemaRegistry

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "t",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "customer", "type": "string"},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [
                        {"name": "sku", "type": "string"},
                        {"name": "qty", "type": "int"},
                        {"name": "price", "type": "double"},
                    ],
                },
            },
        },
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "map", "values": "long"}, "default": {}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}, "default": "A"},
        {"name": "first", "type": ["null", "Line"], "default": None},
        {"name": "rush", "type": "boolean", "default": False},
    ],
}


@dataclass
class Line:
    sku: str
    qty: int
    price: float


@dataclass
class Order:
    id: str
    customer: str
    lines: list[Line]
    note: str | None = None
    tags: dict[str, int] = dataclasses.field(default_factory=dict)
    kind: Literal["A", "B"] = "A"
    first: Line | None = None
    rush: bool = False


class LineM(BaseModel):
    sku: str
    qty: int
    price: float


class OrderM(BaseModel):
    id: str
    customer: str
    lines: list[LineM]
    note: str | None = None
    tags: dict[str, int] = {}
    kind: str = "A"
    first: LineM | None = None
    rush: bool = False


def registry() -> SchemaRegistry:
    reg = SchemaRegistry()
    reg.add(ORDER)
    return reg


VALUE = {
    "id": "o1",
    "customer": "c",
    "lines": [{"sku": "a", "qty": 2, "price": 1.5}],
    "note": None,
    "tags": {"x": 3},
    "kind": "B",
    "first": {"sku": "a", "qty": 2, "price": 1.5},
    "rush": True,
}


def typed_value() -> Order:
    line = Line("a", 2, 1.5)
    return Order("o1", "c", [line], None, {"x": 3}, "B", Line("a", 2, 1.5), True)


def parsed() -> Any:
    return registry().latest("t.Order").parsed


def order_with(name: str, annotation: Any, default: Any = dataclasses.MISSING) -> type:
    """Order with one field's annotation changed (or added)."""
    fields = [(f.name, f.type if f.name != name else annotation, f) for f in dataclasses.fields(Order)]
    spec: list[Any] = []
    for fname, ann, f in fields:
        if fname == name:
            spec.append(
                (fname, ann, dataclasses.field(default=default))
                if default is not dataclasses.MISSING
                else (fname, ann)
            )
        elif f.default is not dataclasses.MISSING:
            spec.append((fname, ann, dataclasses.field(default=f.default)))
        elif f.default_factory is not dataclasses.MISSING:
            spec.append((fname, ann, dataclasses.field(default_factory=f.default_factory)))
        else:
            spec.append((fname, ann))
    if name not in {f.name for f in dataclasses.fields(Order)}:
        spec.append(
            (name, annotation)
            if default is dataclasses.MISSING
            else (name, annotation, dataclasses.field(default=default))
        )
    # fields without defaults first, as dataclasses wants them
    spec.sort(key=lambda s: len(s) == 3)
    made = dataclasses.make_dataclass("Order", spec)
    made.__module__ = __name__  # where its annotations resolve
    return made
