"""The generated Avro codecs against fastavro: the same bytes out, the same values in."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import fastavro
import pytest

from mwcore.errors import SerializationError
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.codegen import compile_codec

ROOT = Path(__file__).resolve().parents[3]

COVERED = {
    "type": "record",
    "name": "t.All",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "raw", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "n", "type": "null"},
        {"name": "e", "type": {"type": "enum", "name": "t.Colour", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "t.Four", "size": 4}},
        {"name": "arr", "type": {"type": "array", "items": "long"}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "opt", "type": ["null", "string"]},
        {"name": "opt_last", "type": ["long", "null"]},
        {"name": "with_default", "type": "long", "default": 7},
        {
            "name": "inner",
            "type": {
                "type": "record",
                "name": "t.Inner",
                "fields": [
                    {"name": "x", "type": "double"},
                    {"name": "colour", "type": "t.Colour"},
                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                ],
            },
        },
        {"name": "inners", "type": {"type": "array", "items": "t.Inner"}},
        {"name": "maybe_inner", "type": ["null", "t.Inner"]},
    ],
}


def _value(schema: Any, named: dict[str, Any], rng: random.Random) -> Any:
    if isinstance(schema, list):
        branch = rng.choice(schema)
        return _value(branch, named, rng)
    if isinstance(schema, dict) and schema.get("type") not in ("record", "enum", "fixed", "array", "map"):
        schema = schema["type"]
    if isinstance(schema, str):
        if schema in named:
            return _value(named[schema], named, rng)
        big = rng.random() < 0.3
        return {
            "null": lambda: None,
            "boolean": lambda: rng.random() < 0.5,
            "int": lambda: rng.randint(-(2**31), 2**31 - 1) if big else rng.randint(-70, 70),
            "long": lambda: rng.randint(-(2**63), 2**63 - 1) if big else rng.randint(-70, 70),
            "float": lambda: float(rng.randint(-1000, 1000)) / 4,
            "double": lambda: rng.uniform(-1e9, 1e9),
            "bytes": lambda: rng.randbytes(rng.randint(0, 90)),
            "string": lambda: "".join(rng.choice("aé€𝄞z ") for _ in range(rng.randint(0, 80))),
        }[schema]()
    kind = schema["type"]
    if kind == "record":
        named[schema["name"]] = schema
        return {f["name"]: _value(f["type"], named, rng) for f in schema["fields"]}
    if kind == "enum":
        named[schema["name"]] = schema
        return rng.choice(schema["symbols"])
    if kind == "fixed":
        named[schema["name"]] = schema
        return rng.randbytes(schema["size"])
    if kind == "array":
        return [
            _value(schema["items"], named, rng)
            for _ in range(rng.randint(0, 70 if rng.random() < 0.1 else 6))
        ]
    return {f"k{i}": _value(schema["values"], named, rng) for i in range(rng.randint(0, 5))}


def _fastavro_bytes(parsed: Any, datum: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, datum)
    return buf.getvalue()


def _schemas() -> list[Any]:
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    return [COVERED] + [registry.latest(n).parsed for n in registry.names()]


@pytest.mark.parametrize("schema", _schemas(), ids=lambda s: s["name"])
def test_same_bytes_and_values_as_fastavro(schema: Any) -> None:
    parsed = fastavro.parse_schema(schema)
    codec = compile_codec(parsed, b"HDR")
    assert codec is not None
    rng = random.Random(7)
    for _ in range(300):
        datum = _value(schema, {}, rng)
        expected = _fastavro_bytes(parsed, datum)
        assert codec.encode(datum) == b"HDR" + expected
        back = fastavro.schemaless_reader(io.BytesIO(expected), parsed, None)
        assert codec.decode(b"XY" + expected, 2) == back


def test_a_missing_field_takes_its_default_or_fails() -> None:
    parsed = fastavro.parse_schema(COVERED)
    codec = compile_codec(parsed)
    assert codec is not None
    datum = _value(COVERED, {}, random.Random(1))
    del datum["with_default"], datum["opt"]
    assert codec.encode(datum) == _fastavro_bytes(parsed, datum)
    del datum["l"]
    with pytest.raises(KeyError):
        codec.encode(datum)


@pytest.mark.parametrize(
    ("field", "bad"),
    [("l", "12"), ("l", 2**63), ("i", 2**31), ("s", b"bytes"), ("e", "PURPLE"), ("fx", b"12345"), ("l", 1.5)],
)
def test_wrong_values_are_refused(field: str, bad: Any) -> None:
    registry = SchemaRegistry()
    registry.add(COVERED)
    serde = AvroSerde(registry, "t.All")
    datum = _value(COVERED, {}, random.Random(2))
    serde.encode(datum)
    datum[field] = bad
    with pytest.raises(SerializationError):
        serde.encode(datum)


def test_truncated_or_corrupt_data_is_refused() -> None:
    registry = SchemaRegistry()
    registry.add(COVERED)
    serde = AvroSerde(registry, "t.All")
    data = serde.encode(_value(COVERED, {}, random.Random(3)))
    step = max(1, (len(data) - 10) // 60)
    for cut in range(len(data) - 1, 9, -step):
        with pytest.raises(SerializationError):
            serde.decode(data[:cut])
    registry_q = SchemaRegistry.from_directory(ROOT / "schemas")
    q = AvroSerde(registry_q, "mw.bench.Event")
    good = q.encode({"query": "a", "lang": "en", "latency_us": 1})
    with pytest.raises(SerializationError):  # a string length beyond the end
        q.decode(good[:10] + b"\x7e" + good[11:])
    with pytest.raises(SerializationError):  # a negative length
        q.decode(good[:10] + b"\x01" + good[11:])


def test_uncovered_schemas_fall_back_to_fastavro() -> None:
    schema = {
        "type": "record",
        "name": "t.Logical",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "either", "type": ["string", "long", "null"]},
        ],
    }
    assert compile_codec(fastavro.parse_schema(schema)) is None
    recursive = {
        "type": "record",
        "name": "t.Node",
        "fields": [{"name": "next", "type": ["null", "t.Node"]}],
    }
    assert compile_codec(fastavro.parse_schema(recursive)) is None
    registry = SchemaRegistry()
    registry.add(schema)
    serde = AvroSerde(registry, "t.Logical")
    import datetime

    at = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    assert serde.decode(serde.encode({"at": at, "either": 5})) == {"at": at, "either": 5}


def test_serdes_and_registries_pickle_without_their_generated_code() -> None:
    """Spark ships them to executors; the codecs are rebuilt there."""
    import pickle

    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    serde = AvroSerde(registry, "mw.bench.Event")
    datum = {"query": "q", "lang": "en", "latency_us": 5000}
    copy = pickle.loads(pickle.dumps(serde))
    assert copy.decode(serde.encode(datum)) == datum
    assert pickle.loads(pickle.dumps(serde.encode))(datum) == serde.encode(datum)
    assert pickle.loads(pickle.dumps(registry)).codec(registry.latest("mw.bench.Count")) is not None
