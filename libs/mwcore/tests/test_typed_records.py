"""Typed records (``serde/typed.py``): values decoded into their types and encoded from
them as the dicts would be, on both cores' codecs, in the harness and the rekey stage
(the check of a type against its schema: ``test_typed_check.py``)."""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel
from typed_orders import ORDER, VALUE, Line, LineM, Order, OrderM, order_with, parsed, registry, typed_value

from mwcore import Computation, Context, Input, Output, Record
from mwcore.cores.python import PythonCore
from mwcore.errors import ConfigError, SerializationError
from mwcore.runtime.layout import Layout, stream_types
from mwcore.runtime.rekey import rekey_stages
from mwcore.serde import record_types, typed
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.native_plan import native_plan
from mwcore.testing import Harness

# -- decoding and encoding ----------------------------------------------------------------


@pytest.mark.parametrize("tp", [Order, OrderM])
def test_values_decode_into_the_type_and_encode_as_the_dict(tp: type) -> None:
    reg = registry()
    serde = AvroSerde(reg, "t.Order")
    _, read, write = typed.check(tp, parsed(), "orders")
    decode = typed.decoding(serde.decode, read)
    encode = typed.encoding(serde.encode, write)
    data = serde.encode(VALUE)
    value = decode(data)
    assert isinstance(value, tp)
    assert isinstance(value.lines[0], (Line, LineM)) and isinstance(value.first, (Line, LineM))
    assert encode(value) == data  # the same bytes as the dict's
    assert encode(dict(VALUE)) == data  # dicts still taken
    if tp is Order:
        assert value == typed_value()


def test_a_plain_dataclass_adopts_the_decoded_dict() -> None:
    read = typed.check(Order, parsed(), "orders").read
    d = {**VALUE, "lines": [dict(VALUE["lines"][0])], "first": None}
    value = read(d)
    assert value.__dict__ is d  # no copy


def test_frozen_slotted_and_post_init_dataclasses_are_made_too() -> None:
    @dataclass(frozen=True)
    class FrozenLine:
        sku: str
        qty: int
        price: float

    @dataclass(slots=True)
    class SlotLine:
        sku: str
        qty: int
        price: float

    made: list[str] = []

    @dataclass
    class CheckedLine:
        sku: str
        qty: int
        price: float

        def __post_init__(self) -> None:
            made.append(self.sku)

    schema = ORDER["fields"][2]["type"]["items"]  # type: ignore[index]
    for tp in (FrozenLine, SlotLine, CheckedLine):
        _, read, write = typed.check(tp, schema, "lines")
        value = read({"sku": "s", "qty": 1, "price": 2.0})
        assert value == tp("s", 1, 2.0)
        assert write(value) == {"sku": "s", "qty": 1, "price": 2.0}
    assert made == ["s", "s"]  # the constructed one, and the decoded one


@pytest.mark.parametrize("tp", [Order, OrderM, order_with("tags", Any)])
def test_the_native_codecs_give_the_same_typed_values_and_bytes(tp: type) -> None:
    """Differential (I-13): the native core's typed decoder and encoder against the
    Python core's, on values decoded in Rust (classes in the plan for plain dataclasses,
    the reader called from Rust for models)."""
    pytest.importorskip("mwcore_native")
    from mwcore.cores.native import NativeCore

    serde = AvroSerde(registry(), "t.Order")
    t = typed.check(tp, parsed(), "orders")
    native, python = NativeCore(), PythonCore()
    if tp is not OrderM:
        assert record_types.classes(native_plan(parsed()), tp) is not None  # made in Rust
    data = serde.encode(VALUE)
    for value in (VALUE, {**VALUE, "first": None, "lines": [], "note": "n"}):
        data = serde.encode(value)
        got = native.decoder(serde, t)(data)
        assert type(got) is tp
        assert got == python.decoder(serde, t)(data)
        assert native.encoder(serde, t)(got) == python.encoder(serde, t)(got) == data
        assert native.encoder(serde, t)(value) == data  # dicts too


def test_a_value_the_type_refuses_is_a_serialization_error_on_both_cores() -> None:
    class Positive(BaseModel):
        sku: str
        qty: int
        price: float

        def model_post_init(self, _: Any) -> None:
            if self.qty <= 0:
                raise ValueError("qty must be positive")

    schema = ORDER["fields"][2]["type"]["items"]  # type: ignore[index]
    reg = SchemaRegistry()
    reg.add({**schema, "namespace": "t"})
    serde = AvroSerde(reg, "t.Line")
    t = typed.check(Positive, reg.latest("t.Line").parsed, "lines")
    data = serde.encode({"sku": "s", "qty": 0, "price": 1.0})
    cores: list[Any] = [PythonCore()]
    try:
        from mwcore.cores.native import NativeCore

        cores.append(NativeCore())
    except ImportError:
        pass
    for core in cores:
        with pytest.raises(SerializationError, match="Positive refuses it"):
            core.decoder(serde, t)(data)


# -- computations -------------------------------------------------------------------------


class Count(Computation[int]):
    name = "typed_count"
    inputs = (Input("orders", schema="t.Order", type=Order),)
    outputs = (Output("copies", schema="t.Order", type=Order),)

    def process_record(self, ctx: Context[int], record: Record) -> None:
        order: Order = record.value
        assert isinstance(order, Order)
        n = ctx.state.get(0) + len(order.lines)
        ctx.state.set(n)
        ctx.produce("copies", dataclasses.replace(order, note=f"{n} lines"), record.timestamp)


def test_the_harness_takes_and_gives_typed_values_and_dicts() -> None:
    h = Harness(Count, registry())
    h.send("orders", typed_value(), 1, key="c")
    h.send("orders", dict(VALUE), 2, key="c")
    out = h.values("copies")
    assert [o.note for o in out] == ["1 lines", "2 lines"]
    assert all(isinstance(o, Order) for o in out)


def test_the_worker_layout_refuses_a_mismatch_before_it_binds() -> None:
    class Wrong(Count):
        name = "wrong_count"
        outputs = (Output("copies", schema="t.Order", type=order_with("customer", int)),)

    with pytest.raises(ConfigError, match="wrong_count: 'copies': type Order does not match"):
        stream_types(Wrong, registry())
    with pytest.raises(ConfigError, match=r"Order\.customer"):
        Harness(Wrong, registry())
    assert set(Layout.of(Count(), "ns").types(registry())) == {"orders", "copies"}


def test_the_rekey_stage_keeps_the_type_and_passes_headers_on() -> None:
    class ByCustomer(Count):
        name = "by_customer"
        inputs: ClassVar[tuple[Input, ...]] = (
            Input("orders", schema="t.Order", type=Order, key=lambda o: o.customer),
        )

    (stage,) = rekey_stages(ByCustomer)
    assert stage.inputs[0].type is Order and stage.outputs[0].type is Order
    h = Harness(stage, registry())
    h.send("orders", typed_value(), 1, key="elsewhere", headers={"trace": b"t1"})
    (out,) = h.output(stage.outputs[0].stream)
    assert out.key == "c" and out.value == typed_value()
    assert out.headers == (("trace", b"t1"),)


def test_a_typed_record_user_code_fails_on_is_dead_lettered_as_the_dict() -> None:
    class Color(enum.Enum):
        RED = 1

    value = typed_value()
    assert typed.plain(value) == VALUE
    assert typed.plain(OrderM.model_validate(VALUE)) == VALUE
    assert typed.plain(VALUE) is VALUE
    assert typed.plain(Color.RED) is Color.RED  # not a record: as it is


# -- what a review found ------------------------------------------------------------------

META_V1 = {
    "type": "record",
    "name": "Doc",
    "namespace": "t",
    "version": 1,
    "fields": [{"name": "id", "type": "string"}],
}
ORIGIN = {"type": "record", "name": "Origin", "fields": [{"name": "zone", "type": "string"}]}
META = {"type": "record", "name": "Meta", "fields": [{"name": "origin", "type": ORIGIN}]}
META_V2 = {
    **META_V1,
    "version": 2,
    "fields": [*META_V1["fields"], {"name": "meta", "type": META, "default": {"origin": {"zone": "eu"}}}],
}


@dataclass
class Origin:
    zone: str


@dataclass
class Meta:
    origin: Origin


@dataclass
class Doc:
    id: str
    meta: Meta


def test_an_older_writers_records_each_get_their_own_default() -> None:
    """Read with an older writer, a field it lacks is the reader schema's default: each
    record its own copy (fastavro shares the schema's object), so neither making the
    nested types around it nor user code changing it touches the next record's."""
    old = SchemaRegistry()
    old.add(META_V1)
    both = SchemaRegistry()
    both.add(META_V1)
    both.add(META_V2)
    data = AvroSerde(old, "t.Doc").encode({"id": "a"})
    serde = AvroSerde(both, "t.Doc")
    t = typed.check(Doc, both.latest("t.Doc").parsed, "docs")
    cores: list[Any] = [PythonCore()]
    if importlib.util.find_spec("mwcore_native") is not None:
        from mwcore.cores.native import NativeCore

        cores.append(NativeCore())
    for core in cores:
        decode = core.decoder(serde, t)
        first = decode(data)
        first.meta.origin.zone = "changed"
        assert decode(data) == Doc("a", Meta(Origin("eu")))
    assert serde.decode(data)["meta"] == {"origin": {"zone": "eu"}}


def test_a_dict_production_holding_typed_parts_is_written_on_both_cores() -> None:
    serde = AvroSerde(registry(), "t.Order")
    t = typed.check(Order, parsed(), "orders")
    value = {**VALUE, "lines": [Line("a", 2, 1.5)], "first": Line("a", 2, 1.5)}
    assert PythonCore().encoder(serde, t)(value) == serde.encode(VALUE)
    if importlib.util.find_spec("mwcore_native") is not None:
        from mwcore.cores.native import NativeCore

        assert NativeCore().encoder(serde, t)(value) == serde.encode(VALUE)


def test_types_made_by_their_init_slots_in_a_base_init_false_and_validators() -> None:
    schema = ORDER["fields"][2]["type"]["items"]  # type: ignore[index]

    @dataclass(slots=True)
    class Base:
        sku: str

    @dataclass
    class FromSlots(Base):
        qty: int
        price: float

    @dataclass
    class Computed:
        sku: str
        qty: int
        price: float = dataclasses.field(init=False, default=0.0)

    import pydantic

    @pydantic.dataclasses.dataclass
    class Checked:
        sku: str
        qty: int = pydantic.Field(gt=0)
        price: float = 0.0

    for tp in (FromSlots, Computed):
        _, read, write = typed.check(tp, schema, "lines")
        value = read({"sku": "s", "qty": 1, "price": 2.0})
        assert (value.sku, value.qty, value.price) == ("s", 1, 2.0)
        assert write(value) == {"sku": "s", "qty": 1, "price": 2.0}
    _, read, _ = typed.check(Checked, schema, "lines")
    with pytest.raises(SerializationError, match="Checked refuses it"):
        read({"sku": "s", "qty": 0, "price": 2.0})


def test_the_harness_takes_the_same_decoded_dict_twice() -> None:
    h = Harness(Count, registry())
    value = {**VALUE, "lines": [dict(VALUE["lines"][0])]}
    h.send("orders", value, 1, key="c", decoded=True)
    h.send("orders", value, 2, key="c", decoded=True)
    assert [o.note for o in h.values("copies")] == ["1 lines", "2 lines"]
    assert isinstance(value["lines"][0], dict)  # the caller's, as it was
