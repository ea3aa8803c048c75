from __future__ import annotations

import pickle
from typing import Any

import pytest

from mwcore.errors import ConfigError, SchemaLookupError, SerializationError, UnknownSchemaError
from mwcore.serde.avro import AvroSerde, SchemaRegistry

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


class DictSource:
    """A schemas topic in memory: documents by fingerprint, and every lookup made."""

    def __init__(self, *registries: SchemaRegistry, fail: bool = False) -> None:
        self.documents: dict[int, Any] = {}
        for reg in registries:
            for name in reg.names():
                sv = reg.latest(name)
                self.documents[sv.fingerprint] = sv.document
        self.lookups: list[int] = []
        self.fail = fail

    def lookup(self, fingerprint: int) -> Any | None:
        self.lookups.append(fingerprint)
        if self.fail:
            raise SchemaLookupError("broker unreachable")
        return self.documents.get(fingerprint)


def _registry(*schemas: dict[str, Any]) -> SchemaRegistry:
    reg = SchemaRegistry()
    for schema in schemas:
        reg.add(schema)
    return reg


def test_a_newer_writer_is_looked_up_once_and_resolved_into_the_old_reader() -> None:
    new = _registry(V2)
    data = AvroSerde(new, "t.Q").encode({"query": "owls", "lang": "fr"})
    old = _registry(V1)
    reader = AvroSerde(old, "t.Q")
    with pytest.raises(UnknownSchemaError):  # offline: the directory is all there is
        reader.decode(data)
    source = DictSource(new)
    old.use_source(source)
    assert reader.decode(data) == {"query": "owls"}
    assert reader.decode(data) == {"query": "owls"}
    assert source.lookups == [new.latest("t.Q").fingerprint]  # cached after the first
    assert old.latest("t.Q").version == 1  # what was learnt is read with, never written
    assert (
        AvroSerde(old, "t.Q").encode({"query": "x"})[2:10]
        == AvroSerde(_registry(V1), "t.Q").encode({"query": "x"})[2:10]
    )
    copy = pickle.loads(pickle.dumps(old))  # offline again, with what it learnt
    assert AvroSerde(copy, "t.Q").decode(data) == {"query": "owls"}


def test_an_unresolvable_writer_is_a_serialization_error_naming_both_versions() -> None:
    v2_required = {**V2, "fields": [{"name": "lang", "type": "string"}]}  # drops "query"
    new = _registry(v2_required)
    data = AvroSerde(new, "t.Q").encode({"lang": "fr"})
    old = _registry(V1)
    old.use_source(DictSource(new))
    with pytest.raises(SerializationError, match=r"cannot decode as t.Q v1 \(written with v2") as info:
        AvroSerde(old, "t.Q").decode(data)
    assert not isinstance(info.value, UnknownSchemaError)


def test_unknown_to_the_source_too_and_an_unreadable_source() -> None:
    stranger = AvroSerde(_registry(V2), "t.Q").encode({"query": "x", "lang": "y"})
    reg = _registry(V1)
    reg.use_source(DictSource())
    with pytest.raises(UnknownSchemaError, match="nor on the schemas topic"):
        AvroSerde(reg, "t.Q").decode(stranger)
    reg.use_source(DictSource(fail=True))
    with pytest.raises(SchemaLookupError):  # not the record's fault: no dead letter
        AvroSerde(reg, "t.Q").decode(stranger)


def test_a_document_whose_fingerprint_is_not_its_key_is_refused() -> None:
    new = _registry(V2)
    data = AvroSerde(new, "t.Q").encode({"query": "x", "lang": "y"})
    source = DictSource()
    source.documents[new.latest("t.Q").fingerprint] = V1  # another schema under its key
    reg = _registry(V1)
    reg.use_source(source)
    with pytest.raises(UnknownSchemaError, match="has fingerprint"):
        AvroSerde(reg, "t.Q").decode(data)
