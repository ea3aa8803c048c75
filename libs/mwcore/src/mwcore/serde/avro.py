"""Avro serde: schemas from ``schemas/*.avsc``, values framed as their stream declares.

Every value starts with a prefix naming its writer schema (``framing.py``): in the
Confluent framing ``00`` and the schema's id in a schema registry, in Avro's
single-object encoding ``C3 01`` and the 8-byte little-endian CRC-64-AVRO fingerprint
of the writer schema's canonical form; then the Avro body. A reader looks the writer
schema up by id or fingerprint and resolves it against its own (reader) schema, so
streams can evolve: old and new writers are read alike.

Several versions of one named schema may live side by side; each file may carry an
integer ``"version"`` attribute and the highest version is the one written and read.

Writer schemas a reader's directory does not have (a producer upgraded first) come
from a ``SchemaSource`` the runtime plugs in where it has a broker: the schemas topic
(``schema_topic``), by fingerprint. Schemas named by registry id come from an
``IdSource``: the schema registry (``transport/schema_registry.py``). Without one
(Spark executors, tests) the registry is what its directory holds and the ids learnt
so far. Either way a writer is resolved against the reader's schema by
fastavro; the writer that is the reader's own schema takes the generated codec.
"""

from __future__ import annotations

import copy
import io
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from mwcore.errors import ConfigError, SerializationError, UnknownSchemaError
from mwcore.serde.codegen import Codec, compile_codec
from mwcore.serde.compat import shares_defaults
from mwcore.serde.framing import (
    SINGLE_OBJECT,
    SINGLE_OBJECT_HEADER_LEN,
    SINGLE_OBJECT_MAGIC,
    Frame,
    Framing,
    frame_of,
    ref_label,
)
from mwcore.serde.schema_doc import sizeless_array, standalone

MAGIC = SINGLE_OBJECT_MAGIC
HEADER_LEN = SINGLE_OBJECT_HEADER_LEN
_FP = struct.Struct("<Q")


@dataclass(frozen=True)
class SchemaVersion:
    name: str
    version: int
    parsed: Any  # fastavro parsed schema
    fingerprint: int
    path: Path | None  # None: learnt by fingerprint (the schemas topic), never written
    document: Any = field(default=None, compare=False, repr=False)  # self-contained JSON


class SchemaSource(Protocol):
    """Where writer schemas the directory lacks are found, by fingerprint."""

    def lookup(self, fingerprint: int) -> Any | None:
        """The schema's self-contained JSON document, or None if there is none.

        Raises ``SchemaLookupError`` if the source cannot be read (not the record's
        fault: the caller must not dead-letter it)."""
        ...


class IdSource(Protocol):
    """Where schemas named by a schema registry's id are found."""

    def document(self, schema_id: int | str) -> Any | None:
        """The schema with ``schema_id`` (its JSON document; a ``str``: a schema GUID), or
        None if there is none.

        Raises ``SchemaLookupError`` if the registry cannot be asked (not the record's
        fault: the caller must not dead-letter it)."""
        ...

    def why_unknown(self, schema_id: int | str) -> str:
        """Why ``document`` last found no schema with ``schema_id``."""
        ...


def _fingerprint(parsed: Any) -> int:
    hex_fp = fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO")
    return int(hex_fp, 16)


def _name_of(parsed: Any) -> str:
    """A schema's full name (an unnamed one, such as an array, by its type)."""
    if isinstance(parsed, dict):
        return str(parsed.get("name") or parsed.get("type"))
    return str(parsed)


def _refuse_sizeless(document: Any, where: str) -> None:
    sizeless = sizeless_array(document)
    if sizeless is not None:
        raise ConfigError(
            f"{where}: an {sizeless} takes no bytes per item, so a record could claim any "
            "number of them: not allowed (count such things with an int instead)"
        )


@dataclass
class SchemaRegistry:
    """All known schemas, by full name (latest version) and by fingerprint (every version)."""

    _latest: dict[str, SchemaVersion] = field(default_factory=dict)
    _by_fp: dict[int, SchemaVersion] = field(default_factory=dict)
    _named: dict[str, Any] = field(default_factory=dict)
    _by_id: dict[int | str, SchemaVersion] = field(default_factory=dict)  # ids, and GUIDs
    _codecs: dict[tuple[int, bytes], Codec | None] = field(default_factory=dict)
    _source: SchemaSource | None = None
    _ids: IdSource | None = None

    @classmethod
    def from_directory(cls, root: str | Path) -> SchemaRegistry:
        root = Path(root)
        if not root.is_dir():
            raise ConfigError(f"schema directory {root} does not exist (set MW_SCHEMAS_DIR)")
        registry = cls()
        for path in sorted(root.rglob("*.avsc")):
            try:
                raw = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
            registry.add(raw, path=path)
        return registry

    def add(self, raw: dict[str, Any], path: Path | None = None) -> SchemaVersion:
        version = int(raw.get("version", 1))
        named = dict(self._named)  # fastavro adds every named type it defines
        try:
            parsed = fastavro.parse_schema(dict(raw), named_schemas=named)
        except Exception as exc:  # fastavro raises several types for bad schemas
            raise ConfigError(f"{path or raw.get('name')}: invalid Avro schema: {exc}") from exc
        name = _name_of(parsed)
        document = standalone(parsed, named)
        _refuse_sizeless(document, str(path or name))
        # The fingerprint of the whole schema, as any Avro implementation computes it
        # (types of other files inlined). Before, a schema using another file's types
        # was fingerprinted without them: data written then stays readable.
        sv = SchemaVersion(name, version, parsed, _fingerprint(document), path, document)
        self._by_fp[sv.fingerprint] = sv
        self._by_fp.setdefault(_fingerprint(parsed), sv)
        current = self._latest.get(name)
        if current is None or version >= current.version:
            self._latest[name] = sv
            self._named[name] = parsed
        return sv

    def latest(self, name: str) -> SchemaVersion:
        try:
            return self._latest[name]
        except KeyError:
            known = ", ".join(sorted(self._latest)) or "none"
            raise ConfigError(f"unknown Avro schema {name!r} (known: {known})") from None

    def knows(self, fp: int) -> bool:
        """Whether a writer schema is known here (no lookup)."""
        return fp in self._by_fp

    def use_source(self, source: SchemaSource | None) -> None:
        """Look writer schemas the directory lacks up in ``source`` (None: offline)."""
        self._source = source

    def by_fingerprint(self, fp: int) -> SchemaVersion:
        sv = self._by_fp.get(fp)
        if sv is not None:
            return sv
        if self._source is None:
            raise UnknownSchemaError(f"no schema with fingerprint {fp:016x}")
        document = self._source.lookup(fp)
        if document is None:
            where = "neither in the schemas directory nor on the schemas topic"
            raise UnknownSchemaError(f"no schema with fingerprint {fp:016x} ({where})")
        try:
            return self.add_writer(document, fp)
        except ConfigError as exc:
            raise UnknownSchemaError(str(exc)) from exc

    def use_ids(self, source: IdSource | None) -> None:
        """Look schemas named by registry id up in ``source`` (None: offline)."""
        self._ids = source

    def writer_of(self, frame: Frame) -> SchemaVersion:
        """The writer schema a value's frame names (``UnknownSchemaError``: none)."""
        if frame.wire == "confluent":
            return self.by_id(frame.ref)
        return self.by_fingerprint(int(frame.ref))

    def learn_id(self, schema_id: int, sv: SchemaVersion) -> None:
        """``schema_id`` names ``sv`` (a schema this process registered, or read)."""
        self._by_id[schema_id] = sv

    def by_id(self, schema_id: int | str) -> SchemaVersion:
        """The writer schema a registry's id (or schema GUID, a ``str``) names; the
        reader's own version where it names a schema of the same canonical form
        (``UnknownSchemaError``: none)."""
        sv = self._by_id.get(schema_id)
        if sv is not None:
            return sv
        label = ref_label(schema_id)
        if self._ids is None:
            raise UnknownSchemaError(f"no schema with {label} (no schema registry here)")
        document = self._ids.document(schema_id)
        if document is None:
            why = self._ids.why_unknown(schema_id)
            raise UnknownSchemaError(f"no schema with {label}: {why}")
        try:
            sv = self.add_writer(document)
        except ConfigError as exc:
            raise UnknownSchemaError(f"{label}: {exc}") from exc
        self._by_id[schema_id] = sv
        return sv

    def add_writer(self, document: Any, fp: int | None = None) -> SchemaVersion:
        """A writer schema known by fingerprint only (from the schemas topic): read with,
        never written, and never the reader's schema of its name."""
        label = f"schema {fp:016x}" if fp is not None else "schema"
        try:
            parsed = fastavro.parse_schema(document, named_schemas={})
            version = int(document.get("version", 1)) if isinstance(document, dict) else 1
        except Exception as exc:  # fastavro raises several types for bad schemas
            raise ConfigError(f"{label}: invalid Avro schema: {exc}") from exc
        name = _name_of(parsed)
        _refuse_sizeless(document, label)
        sv = SchemaVersion(name, version, parsed, _fingerprint(parsed), None, document)
        if fp is not None and sv.fingerprint != fp:
            raise ConfigError(f"{label}: its document has fingerprint {sv.fingerprint:016x}")
        return self._by_fp.setdefault(sv.fingerprint, sv)

    def names(self) -> list[str]:
        return sorted(self._latest)

    def __getstate__(self) -> dict[str, Any]:
        # Generated codecs are rebuilt where the registry lands (e.g. on Spark
        # executors); they hold compiled code that does not pickle. A schemas topic holds
        # broker clients: the copy reads no topic, with the writers learnt so far. A
        # schema registry's client travels (a client of its own to the same registry):
        # ids unknown here are looked up there, as any Confluent deserializer does.
        return {**self.__dict__, "_codecs": {}, "_source": None}

    def codec(self, sv: SchemaVersion, header: bytes | None = None) -> Codec | None:
        """The generated codec of a schema version, its output starting with ``header``
        (default: its single-object header); None: fastavro handles it."""
        prefix = MAGIC + _FP.pack(sv.fingerprint) if header is None else header
        key = (sv.fingerprint, prefix)
        if key not in self._codecs:
            self._codecs[key] = compile_codec(sv.parsed, prefix)
        return self._codecs[key]


class AvroSerde:
    """Encodes with one writer schema, decodes any known writer into one reader schema;
    values framed as ``framing`` says (``framing.py``: the single-object encoding unless
    told)."""

    __slots__ = (
        "_copy_resolved",
        "_decode_body",
        "_encode",
        "_fingerprint",
        "_framing",
        "_generated",
        "_header",
        "_reads",
        "_registry",
        "_schema",
    )

    def __init__(
        self, registry: SchemaRegistry, name: str, *, generated: bool = True, framing: Framing = SINGLE_OBJECT
    ) -> None:
        self._registry = registry
        self._generated = generated
        self._framing = framing
        self._reads = framing.reads
        self._schema = registry.latest(name)
        self._copy_resolved = shares_defaults(self._schema.parsed)  # (decode, an older writer)
        self._fingerprint = self._schema.fingerprint
        self._header = framing.header(self._schema.fingerprint)
        if framing.schema_id is not None:
            registry.learn_id(framing.schema_id, self._schema)
        codec = registry.codec(self._schema, self._header) if generated else None
        self._encode = codec.encode if codec is not None else None
        self._decode_body = codec.decode if codec is not None else None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_serde, (self._registry, self._schema.name, self._generated, self._framing))

    @property
    def schema(self) -> SchemaVersion:
        return self._schema

    @property
    def framing(self) -> Framing:
        return self._framing

    @property
    def header(self) -> bytes:
        """What every value it writes starts with (its framing's prefix)."""
        return self._header

    def encode(self, datum: Any) -> bytes:
        if self._encode is not None:
            try:
                return self._encode(datum)
            except Exception as exc:
                raise SerializationError(f"cannot encode as {self._schema.name}: {exc!r}") from exc
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            fastavro.schemaless_writer(buf, self._schema.parsed, datum)
        except Exception as exc:
            raise SerializationError(f"cannot encode as {self._schema.name}: {exc}") from exc
        return buf.getvalue()

    def decode(self, data: bytes) -> Any:
        if self._decode_body is not None and data.startswith(self._header):
            try:
                return self._decode_body(data, len(self._header))
            except Exception as exc:
                raise SerializationError(f"cannot decode as {self._schema.name}: {exc!r}") from exc
        frame = frame_of(data)
        if frame is None:
            expected = _expected(self._reads)
            raise SerializationError(f"not Avro in a framing of this stream ({expected}): bad marker")
        if frame.wire not in self._reads:
            raise SerializationError(
                f"framed {frame.wire}, but this stream reads {_expected(self._reads)} only: bad marker"
            )
        reader = self._schema
        # An unknown writer: UnknownSchemaError (a dead letter), or SchemaLookupError
        # (the source cannot be read: raised on, the record is not at fault).
        if frame.wire == "confluent":
            writer = self._registry.by_id(frame.ref)
            label = ref_label(frame.ref)
        else:
            fp = int(frame.ref)
            writer = reader if fp == reader.fingerprint else self._registry.by_fingerprint(fp)
            label = f"{fp:016x}"
        if writer is reader and self._decode_body is not None:
            try:
                return self._decode_body(data, frame.body)
            except Exception as exc:
                raise SerializationError(f"cannot decode as {reader.name}: {exc!r}") from exc
        resolve_into = None if writer is reader else reader.parsed
        try:
            value = fastavro.schemaless_reader(io.BytesIO(data[frame.body :]), writer.parsed, resolve_into)
            # read with an older writer, a field it lacks is the reader schema's default
            # object itself (fastavro shares it): a mutable one, each value gets its own copy
            return copy.deepcopy(value) if resolve_into is not None and self._copy_resolved else value
        except Exception as exc:
            what = f"{reader.name} v{reader.version}"
            if writer is not reader:
                what += f" (written with v{writer.version}, {label})"
            raise SerializationError(f"cannot decode as {what}: {exc}") from exc


def _expected(reads: frozenset[str]) -> str:
    return " or ".join(sorted(reads))


def _serde(
    registry: SchemaRegistry, name: str, generated: bool, framing: Framing = SINGLE_OBJECT
) -> AvroSerde:
    return AvroSerde(registry, name, generated=generated, framing=framing)


def writer_fingerprint(data: bytes) -> int | None:
    """The fingerprint of the writer schema of a single-object encoded value (None: the
    value is not Avro single-object encoded)."""
    if len(data) < HEADER_LEN or data[:2] != MAGIC:
        return None
    fp: int = _FP.unpack_from(data, 2)[0]
    return fp


def decode_any(registry: SchemaRegistry, data: bytes) -> tuple[str, Any]:
    """Decode with the writer schema the message names (no reader schema), in either
    framing: the schema's name and the value. For tools that show any stream (``mw tail``)."""
    frame = frame_of(data)
    if frame is None:
        raise SerializationError("not Avro, in neither framing (bad marker)")
    writer = registry.writer_of(frame)
    try:
        return writer.name, fastavro.schemaless_reader(io.BytesIO(data[frame.body :]), writer.parsed, None)
    except Exception as exc:
        raise SerializationError(f"cannot decode as {writer.name}: {exc}") from exc


def find_schemas(start: Path | None = None) -> Path:
    """The nearest ``schemas/`` directory at or above ``start`` (default: cwd)."""
    base = (start or Path.cwd()).resolve()
    for d in (base, *base.parents):
        if (d / "schemas").is_dir():
            return d / "schemas"
    raise FileNotFoundError(f"no schemas/ directory at or above {base}")
