"""The two framings of a value (``serde/framing.py``) and how a serde reads and writes them:
pure logic, with a schema registry's ids served from a dict (the real registry is
``tests/test_interop.py``'s)."""

from __future__ import annotations

import io
import json
import struct
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest

from mwcore.cores import core
from mwcore.errors import SerializationError, UnknownSchemaError
from mwcore.serde.avro import AvroSerde, SchemaRegistry, decode_any
from mwcore.serde.framing import (
    Framing,
    confluent_header,
    frame_of,
    single_object_header,
    with_schema_id_header,
)
from testbed.native import requires_native

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
NUMBER = "mw.examples.Number"


class Ids:
    """An id source as the schema registry is one: documents by id, the rest unknown."""

    def __init__(self, documents: dict[int | str, Any]) -> None:
        self.documents = documents
        self.asked: list[int | str] = []

    def document(self, schema_id: int | str) -> Any | None:
        self.asked.append(schema_id)
        return self.documents.get(schema_id)

    def why_unknown(self, schema_id: int | str) -> str:
        return "not in the dict"


def _registry(documents: dict[int | str, Any] | None = None) -> tuple[SchemaRegistry, Ids]:
    registry = SchemaRegistry.from_directory(SCHEMAS)
    ids = Ids(documents or {})
    registry.use_ids(ids)
    return registry, ids


def _body(document: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(document), value)
    return out.getvalue()


def test_frames() -> None:
    assert frame_of(confluent_header(7) + b"x") == frame_of(b"\x00\x00\x00\x00\x07x")
    frame = frame_of(b"\x00\x00\x00\x01\x00body")
    assert frame is not None and (frame.wire, frame.ref, frame.body) == ("confluent", 256, 5)
    so = frame_of(single_object_header(0x1122334455667788) + b"b")
    assert so is not None and (so.wire, so.ref, so.body) == ("single-object", 0x1122334455667788, 10)
    assert frame_of(b"\x00\x00\x01") is None  # too short for an id
    assert frame_of(b"\xc3\x01\x00") is None
    assert frame_of(b"{json}") is None
    with pytest.raises(ValueError):
        Framing("confluent")  # an id is needed to write
    with pytest.raises(ValueError):
        confluent_header(-1)


@pytest.mark.parametrize("generated", [True, False])
def test_confluent_round_trip_and_header(generated: bool) -> None:
    registry, ids = _registry()
    serde = AvroSerde(registry, NUMBER, framing=Framing("confluent", 42), generated=generated)
    data = serde.encode({"n": -5})
    assert data[:5] == b"\x00" + struct.pack(">I", 42)
    assert data[5:] == _body(registry.latest(NUMBER).document, {"n": -5})
    assert serde.decode(data) == {"n": -5}
    assert ids.asked == []  # its own id: no lookup


def test_a_writer_known_by_id_only_is_resolved_into_the_reader() -> None:
    newer = json.loads((SCHEMAS / "examples" / "number.avsc").read_text())
    newer["fields"].append({"name": "note", "type": "string", "default": ""})
    registry, ids = _registry({9: newer})
    serde = AvroSerde(registry, NUMBER, framing=Framing("confluent", 1))
    data = confluent_header(9) + _body(newer, {"n": 3, "note": "hi"})
    assert serde.decode(data) == {"n": 3}
    assert serde.decode(data) == {"n": 3}
    assert ids.asked == [9]  # once: an id names one schema for good
    assert decode_any(registry, data) == ("mw.examples.Number", {"n": 3, "note": "hi"})


def test_an_id_naming_the_readers_own_schema_takes_its_codec() -> None:
    own = json.loads((SCHEMAS / "examples" / "number.avsc").read_text())
    registry, _ = _registry({77: own})
    serde = AvroSerde(registry, NUMBER, framing=Framing("confluent", 1))
    assert registry.by_id(77) is serde.schema
    assert serde.decode(confluent_header(77) + _body(own, {"n": 8})) == {"n": 8}


def test_an_unknown_id_is_an_unknown_schema() -> None:
    registry, _ = _registry()
    serde = AvroSerde(registry, NUMBER, framing=Framing("confluent", 1))
    with pytest.raises(UnknownSchemaError, match="registry id 5: not in the dict"):
        serde.decode(confluent_header(5) + b"\x02")


GUID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def test_confluent_kafkas_variants_name_a_schema_by_guid_or_in_a_header() -> None:
    """What confluent-kafka 2.16's deserializer reads besides the id's prefix: ``01`` and a
    schema GUID, and either prefix in a ``__value_schema_id`` header over the body alone."""
    guid = uuid.UUID(GUID)
    frame = frame_of(b"\x01" + guid.bytes + b"body")
    assert frame is not None and (frame.wire, frame.ref, frame.body) == ("confluent", GUID, 17)
    assert frame_of(b"\x01" + guid.bytes[:15]) is None  # too short for a GUID
    own = json.loads((SCHEMAS / "examples" / "number.avsc").read_text())
    registry, ids = _registry({GUID: own})
    serde = AvroSerde(registry, NUMBER, framing=Framing("confluent", 1))
    body = _body(own, {"n": 4})
    assert serde.decode(with_schema_id_header(b"\x01" + guid.bytes, body)) == {"n": 4}
    assert serde.decode(with_schema_id_header(confluent_header(1), body)) == {"n": 4}
    assert ids.asked == [GUID]
    with pytest.raises(UnknownSchemaError, match=f"schema GUID {GUID[:-1]}f: not in the dict"):
        serde.decode(b"\x01" + uuid.UUID(GUID[:-1] + "f").bytes + body)
    junks = (b"", b"\x00\x00\x01", b"\x02" + guid.bytes, single_object_header(5), confluent_header(1) + b"x")
    for junk in junks:
        with pytest.raises(SerializationError, match=r"__value_schema_id header .* bad marker"):
            with_schema_id_header(junk, body)


def test_a_reader_takes_only_the_framings_its_stream_declares() -> None:
    registry, _ = _registry()
    single = AvroSerde(registry, NUMBER)
    confluent = AvroSerde(registry, NUMBER, framing=Framing("confluent", 1))
    both = AvroSerde(registry, NUMBER, framing=Framing("confluent", 1, read_also="single-object"))
    old, new = single.encode({"n": 1}), confluent.encode({"n": 2})
    with pytest.raises(SerializationError, match="reads confluent only: bad marker"):
        confluent.decode(old)  # a collided fingerprint cannot be replayed onto it
    with pytest.raises(SerializationError, match="reads single-object only: bad marker"):
        single.decode(new)
    assert both.decode(old) == {"n": 1} and both.decode(new) == {"n": 2}
    with pytest.raises(SerializationError, match="bad marker"):
        both.decode(b"junk")


@requires_native
def test_the_native_codecs_read_and_write_the_confluent_framing() -> None:
    registry, _ = _registry()
    serde = AvroSerde(registry, NUMBER, framing=Framing("confluent", 300, read_also="single-object"))
    native = core("native")
    encode, decode = native.encoder(serde), native.decoder(serde)
    data = encode({"n": 12})
    assert data == serde.encode({"n": 12})
    assert decode(data) == {"n": 12}
    assert decode(AvroSerde(registry, NUMBER).encode({"n": 4})) == {"n": 4}  # read_also: through Python
    with pytest.raises(SerializationError):
        decode(confluent_header(301) + b"\x02")


class _Consumed:
    """A consumed message as ``mw tail`` reads one (value and headers; the rest fixed)."""

    def __init__(self, value: bytes, headers: list[tuple[str, bytes | None]]) -> None:
        self._value, self._headers = value, headers

    def value(self) -> bytes:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]]:
        return self._headers

    def key(self) -> bytes:
        return b"k"

    def timestamp(self) -> tuple[int, int]:
        return (1, 5)

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 3


def test_mw_tail_shows_a_value_named_by_its_header() -> None:
    from mwcore.tools.tail import render

    own = json.loads((SCHEMAS / "examples" / "number.avsc").read_text())
    registry, _ = _registry({9: own})
    body = _body(own, {"n": 6})
    shown = render(_Consumed(body, [("__value_schema_id", confluent_header(9))]), "numbers", registry)  # type: ignore[arg-type]
    assert (shown["schema"], shown["value"]) == (NUMBER, {"n": 6})
    junk = render(_Consumed(body, [("__value_schema_id", b"\x09")]), "numbers", registry)  # type: ignore[arg-type]
    assert junk["schema"] is None and "bad marker" in junk["value"]["undecodable"]
