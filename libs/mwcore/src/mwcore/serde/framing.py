"""How a value on a topic names its writer schema: its framing.

Two framings, declared per stream (``Input(wire=...)``, ``Output(wire=...)``):

- ``"confluent"``, the Kafka ecosystem's: the byte ``00``, the writer schema's id in a
  schema registry (4 bytes, big-endian), then the Avro body. What Kafka Connect's
  AvroConverter, ksqlDB, Flink's ``avro-confluent``, kcat ``-s avro`` and the
  registries' own serializers write and read. Read too, as confluent-kafka's
  deserializer (2.16) reads them: the byte ``01`` and a schema GUID (16 bytes) in
  place of the id; and that prefix, or the id's, in a ``__value_schema_id`` header
  with the body alone as the value (``with_schema_id_header``), which its
  ``header_schema_id_serializer`` writes. The kit writes the id's prefix.
- ``"single-object"``, Avro's own: ``C3 01``, the CRC-64-AVRO fingerprint of the
  writer schema (8 bytes, little-endian), then the body; for streams that need no
  registry (the schemas travel on the namespace's ``mw.schemas`` topic).

A reader takes the framing its stream declares, and the other one too only where the
stream says so (``read_also``: a migration window). Taking both by default would let a
single-object record whose fingerprint collides with a real one (CRC-64 is easy to
collide) be read on a stream that moved to registry ids.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Literal, get_args

from mwcore.errors import SerializationError

Wire = Literal["confluent", "single-object"]
WIRES: tuple[Wire, ...] = get_args(Wire)
DEFAULT_WIRE: Wire = "confluent"  # what a stream that declares none is framed in (MW_WIRE)

CONFLUENT_MAGIC = 0x00
CONFLUENT_HEADER_LEN = 5
GUID_MAGIC = 0x01  # confluent-kafka's magic byte "v1": a schema GUID instead of an id
GUID_HEADER_LEN = 17
SCHEMA_ID_HEADER = "__value_schema_id"  # confluent-kafka's header of a value's schema id
SINGLE_OBJECT_MAGIC = b"\xc3\x01"
SINGLE_OBJECT_HEADER_LEN = 10
_ID = struct.Struct(">I")
_FP = struct.Struct("<Q")
MAX_SCHEMA_ID = (1 << 31) - 1  # the registries' ids are Java ints


def confluent_header(schema_id: int) -> bytes:
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"schema id {schema_id} out of range")
    return bytes([CONFLUENT_MAGIC]) + _ID.pack(schema_id)


def single_object_header(fingerprint: int) -> bytes:
    return SINGLE_OBJECT_MAGIC + _FP.pack(fingerprint)


@dataclass(frozen=True, slots=True)
class Frame:
    """What a value's prefix says: its framing, the writer schema's reference in it (a
    registry id or a fingerprint) and where the Avro body starts."""

    wire: Wire
    ref: int | str  # a registry id or fingerprint; a schema GUID (str) in the confluent framing
    body: int


def frame_of(data: bytes) -> Frame | None:
    """The frame of a value (None: it starts with neither framing's prefix)."""
    if len(data) >= CONFLUENT_HEADER_LEN and data[0] == CONFLUENT_MAGIC:
        return Frame("confluent", _ID.unpack_from(data, 1)[0], CONFLUENT_HEADER_LEN)
    if len(data) >= GUID_HEADER_LEN and data[0] == GUID_MAGIC:
        return Frame("confluent", str(uuid.UUID(bytes=data[1:GUID_HEADER_LEN])), GUID_HEADER_LEN)
    if len(data) >= SINGLE_OBJECT_HEADER_LEN and data[:2] == SINGLE_OBJECT_MAGIC:
        return Frame("single-object", _FP.unpack_from(data, 2)[0], SINGLE_OBJECT_HEADER_LEN)
    return None


def ref_label(schema_id: int | str) -> str:
    """How a message names a registry's schema: by id, or by GUID (a ``str``)."""
    return f"schema GUID {schema_id}" if isinstance(schema_id, str) else f"registry id {schema_id}"


def with_schema_id_header(header: bytes, value: bytes) -> bytes:
    """A value whose ``__value_schema_id`` header (``header``) names its writer schema,
    the value holding the body alone, as the prefixed value it stands for (the header
    first, as confluent-kafka's deserializer takes it over any prefix of the value).
    ``SerializationError`` unless the header is ``00`` and an id or ``01`` and a GUID."""
    n = len(header)
    if (n == CONFLUENT_HEADER_LEN and header[0] == CONFLUENT_MAGIC) or (
        n == GUID_HEADER_LEN and header[0] == GUID_MAGIC
    ):
        return header + value
    raise SerializationError(
        f"a {SCHEMA_ID_HEADER} header of {n} bytes is neither 00 and a 4-byte schema id "
        "nor 01 and a 16-byte schema GUID: bad marker"
    )


def check_wire(value: object, where: str) -> Wire:
    """``value`` as a framing's name (``ValueError`` naming ``where`` otherwise)."""
    for wire in WIRES:
        if value == wire:
            return wire
    raise ValueError(f"{where}: wire must be one of {', '.join(map(repr, WIRES))}, got {value!r}")


@dataclass(frozen=True, slots=True)
class Framing:
    """How one stream's values are framed: ``wire`` is written (with ``schema_id``, the
    writer schema's registry id, for ``"confluent"``) and read; ``read_also`` is read too
    (None: nothing else)."""

    wire: Wire = "single-object"
    schema_id: int | None = None
    read_also: Wire | None = None

    def __post_init__(self) -> None:
        if self.wire == "confluent" and self.schema_id is None:
            raise ValueError("a confluent framing needs its writer schema's registry id")

    @property
    def reads(self) -> frozenset[Wire]:
        return frozenset((self.wire,) if self.read_also is None else (self.wire, self.read_also))

    def header(self, fingerprint: int) -> bytes:
        """What each value written starts with (``fingerprint``: the writer schema's)."""
        if self.wire == "confluent":
            assert self.schema_id is not None
            return confluent_header(self.schema_id)
        return single_object_header(fingerprint)


SINGLE_OBJECT = Framing()
