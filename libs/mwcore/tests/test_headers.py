"""User headers (``mwcore.api.headers``): what ``ctx.produce(..., headers=...)`` takes and
refuses, and a record's headers reaching user code, in memory (the round trip through a
real broker, a crash and a re-send is ``tests/test_interop_headers.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from mwcore import Computation, Context, Input, Output, Record
from mwcore.api.headers import ReservedHeader, is_reserved, over_bounds, to_send
from mwcore.limits import MAX_HEADER_BYTES, MAX_HEADERS
from mwcore.serde.avro import SchemaRegistry
from mwcore.testing import Harness

EVENT = {"type": "record", "name": "t.Event", "fields": [{"name": "n", "type": "long"}]}


class Echo(Computation):
    """Produces each record once, with its headers and one of its own."""

    name = "echo"
    inputs = (Input("events", schema="t.Event"),)
    outputs = (Output("echoed", schema="t.Event"),)

    def process_record(self, ctx: Context, record: Record) -> None:
        headers = [*((n, v) for n, v in record.headers if v is not None), ("seen-by", "echo")]
        ctx.produce("echoed", record.value, record.timestamp, headers=headers)


def _harness() -> Harness:
    registry = SchemaRegistry()
    registry.add(EVENT)
    return Harness(Echo, registry)


def test_a_record_s_headers_reach_user_code_and_its_productions_carry_them() -> None:
    h = _harness()
    h.send("events", {"n": 1}, 10, key="k", headers={"trace": b"t-1", "tenant": "acme"})
    h.send("events", {"n": 2}, 11, key="k")
    first, second = h.output("echoed")
    assert first.headers == (("trace", b"t-1"), ("tenant", b"acme"), ("seen-by", b"echo"))
    assert second.headers == (("seen-by", b"echo"),)


def test_headers_come_as_a_mapping_or_as_pairs_in_order_a_name_repeated() -> None:
    assert to_send({"a": "é", "b": b"\x00"}) == (("a", "é".encode()), ("b", b"\x00"))
    assert to_send([("b", b"1"), ("a", b""), ("b", "2")]) == (("b", b"1"), ("a", b""), ("b", b"2"))
    assert to_send(()) == ()


@pytest.mark.parametrize("name", ["mw-id", "MW-ID", "Mw-Late-Ms", "mw-anything", "__value_schema_id"])
def test_the_kit_s_own_headers_are_reserved(name: str) -> None:
    assert is_reserved(name)
    with pytest.raises(ReservedHeader, match="reserved"):
        to_send({name: b"x"})
    h = _harness()
    with pytest.raises(ReservedHeader):  # the harness takes what a producer could set
        h.send("events", {"n": 1}, 10, key="k", headers=[(name, b"x")])


@pytest.mark.parametrize("name", ["mwid", "m-w", "trace", "x-mw-id", ""])
def test_other_names_are_the_user_s(name: str) -> None:
    assert not is_reserved(name)
    assert to_send({name: b"v"}) == ((name, b"v"),)


@pytest.mark.parametrize(
    "given, error",
    [
        ([("n", 5)], TypeError),
        ([("n", None)], TypeError),
        ([(b"n", b"v")], TypeError),
        ([("n",)], TypeError),
        (["nv"], TypeError),
        ([(f"h{i}", b"") for i in range(MAX_HEADERS + 1)], ValueError),
        ([("big", bytes(MAX_HEADER_BYTES - 2))], ValueError),
    ],
    ids=[
        "int-value",
        "none-value",
        "bytes-name",
        "one-item",
        "a-string",
        "one-too-many",
        "one-byte-too-many",
    ],
)
def test_what_is_refused(given: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        to_send(given)


def test_the_bounds_themselves_are_taken() -> None:
    assert len(to_send([(f"h{i}", b"") for i in range(MAX_HEADERS)])) == MAX_HEADERS
    assert to_send([("big", bytes(MAX_HEADER_BYTES - 3))])[0][1] == bytes(MAX_HEADER_BYTES - 3)


def test_a_production_with_bad_headers_fails_its_record_and_leaves_nothing() -> None:
    class Bad(Echo):
        name = "bad"

        def process_record(self, ctx: Context, record: Record) -> None:
            ctx.produce("echoed", record.value, record.timestamp, headers={"fine": b"1"})
            ctx.produce("echoed", record.value, record.timestamp, headers={"mw-id": b"x"})

    registry = SchemaRegistry()
    registry.add(EVENT)
    h = Harness(Bad, registry, raise_errors=False)
    h.send("events", {"n": 1}, 10, key="k")
    assert h.output("echoed") == []
    (failure,) = h.failures
    assert isinstance(failure.error, ReservedHeader)


def test_over_bounds_names_the_reason() -> None:
    exc = over_bounds(MAX_HEADERS + 1, 10)
    assert exc.reason == "headers_too_large" and str(MAX_HEADERS) in str(exc)
