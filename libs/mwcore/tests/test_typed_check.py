"""Typed records (``serde/typed.py``): a type is checked against its stream's schema
when a worker or the harness starts, and a mismatch, or what Avro does not decode as
is, is refused in one line naming the field."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from typed_orders import VALUE, Line, Order, OrderM, order_with, parsed, registry

from mwcore.errors import ConfigError
from mwcore.serde import record_types, typed
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.native_plan import native_plan

# -- the check ----------------------------------------------------------------------------


def test_matching_types_pass_the_check() -> None:
    for tp in (Order, OrderM):
        t = typed.check(tp, parsed(), "orders")
        assert t.type is tp and callable(t.read) and callable(t.write)


@pytest.mark.parametrize(
    ("tp", "says"),
    [
        (order_with("customer", int), "Order.customer: the schema's string is not a int"),
        (order_with("note", str), "Order.note: the schema allows null, the type str does not"),
        (order_with("id", "str | None"), "Order.id: the type allows None, the schema does not"),
        (order_with("lines", dict[str, Line]), "Order.lines: the schema's array is not a dict"),
        (order_with("tags", dict[str, str]), "Order.tags{}: the schema's long is not a str"),
        (order_with("rush", int), "Order.rush: the schema's boolean is not a int"),
        (order_with("kind", Literal[1, 2]), "Order.kind: the schema's enum is not a"),
        (order_with("extra", int), "Order.extra is not a field of t.Order"),
        (
            order_with("lines", list[dict[str, Any]]),
            "Order.lines[]: the schema's record t.Line is not a dict",
        ),
    ],
)
def test_a_mismatch_is_one_line_naming_the_field(tp: type, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        typed.check(tp, parsed(), "comp: 'orders'")
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("comp: 'orders': type Order does not match schema t.Order: "), text
    assert says in text, text


def test_a_missing_field_and_a_non_record_type_are_refused() -> None:
    @dataclass
    class Short:
        id: str

    with pytest.raises(ConfigError, match=r"Short has no field 'customer' of t\.Order"):
        typed.check(Short, parsed(), "orders")
    with pytest.raises(ConfigError, match=r"is not a dataclass or a pydantic model"):
        typed.check(dict, parsed(), "orders")


def test_a_field_with_a_default_beyond_the_schema_is_allowed_and_made() -> None:
    @dataclass
    class Wider(Order):
        seen: list[str] = dataclasses.field(default_factory=lambda: ["default"])

    t = typed.check(Wider, parsed(), "orders")
    serde = AvroSerde(registry(), "t.Order")
    got = typed.decoding(serde.decode, t.read)(serde.encode(VALUE))
    assert isinstance(got, Wider) and got.seen == ["default"]  # made by its __init__
    assert typed.encoding(serde.encode, t.write)(got) == serde.encode(VALUE)
    assert record_types.classes(native_plan(parsed()), Wider) is None  # not made in Rust either


@pytest.mark.parametrize(
    ("annotation", "says"),
    [
        (Literal["A"], "enum is not a"),  # not every symbol
        (enum.Enum("Kind", "A B"), "enum is not a"),  # decoded as a str
        (tuple[Line, ...], "array is not a"),  # decoded as a list
    ],
)
def test_what_avro_does_not_decode_as_is_refused(annotation: Any, says: str) -> None:
    field = "kind" if "enum" in says else "lines"
    with pytest.raises(ConfigError, match=says):
        typed.check(order_with(field, annotation), parsed(), "orders")


@dataclass
class Node:
    value: int
    next: Node | None = None


def test_a_recursive_record_is_refused_in_one_short_line() -> None:
    schema = {
        "type": "record",
        "name": "Node",
        "namespace": "t",
        "fields": [
            {"name": "value", "type": "long"},
            {"name": "next", "type": ["null", "t.Node"], "default": None},
        ],
    }
    reg = SchemaRegistry()
    reg.add(schema)
    with pytest.raises(ConfigError, match="recursive") as caught:
        typed.check(Node, reg.latest("t.Node").parsed, "nodes")
    assert len(str(caught.value)) < 200
