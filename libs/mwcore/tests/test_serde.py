from __future__ import annotations

import pytest

from mwcore.errors import ConfigError, SerializationError, UnknownSchemaError
from mwcore.serde import AvroSerde, SchemaRegistry

V1 = {
    "type": "record",
    "name": "Q",
    "namespace": "t",
    "fields": [{"name": "query", "type": "string"}],
}
V2 = {
    "type": "record",
    "name": "Q",
    "namespace": "t",
    "version": 2,
    "fields": [
        {"name": "query", "type": "string"},
        {"name": "lang", "type": "string", "default": "en"},
    ],
}


def test_single_object_round_trip() -> None:
    reg = SchemaRegistry()
    reg.add(V1)
    serde = AvroSerde(reg, "t.Q")
    data = serde.encode({"query": "cats"})
    assert data[:2] == b"\xc3\x01"
    assert serde.decode(data) == {"query": "cats"}


def test_old_writer_is_resolved_into_new_reader() -> None:
    old = SchemaRegistry()
    old.add(V1)
    data = AvroSerde(old, "t.Q").encode({"query": "dogs"})
    new = SchemaRegistry()
    new.add(V1)
    new.add(V2)
    assert new.latest("t.Q").version == 2
    assert AvroSerde(new, "t.Q").decode(data) == {"query": "dogs", "lang": "en"}


def test_unknown_writer_and_garbage_are_serialization_errors() -> None:
    reg = SchemaRegistry()
    reg.add(V2)
    other = SchemaRegistry()
    other.add(V1)
    with pytest.raises(UnknownSchemaError):
        AvroSerde(reg, "t.Q").decode(AvroSerde(other, "t.Q").encode({"query": "x"}))
    with pytest.raises(SerializationError):
        AvroSerde(reg, "t.Q").decode(b"not avro at all")
    with pytest.raises(SerializationError):
        AvroSerde(reg, "t.Q").encode({"nope": 1})


def test_unknown_schema_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown Avro schema"):
        AvroSerde(SchemaRegistry(), "t.Missing")
