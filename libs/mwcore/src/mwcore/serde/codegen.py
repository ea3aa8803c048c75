"""Avro encoders and decoders generated per schema: plain Python, no per-call set-up.

``fastavro.schemaless_reader``/``schemaless_writer`` walk the schema on every call and
need a file object around the bytes; for the small records of a stream that costs
more than the encoding itself. ``compile_codec`` turns one parsed schema into a
straight-line ``encode(datum) -> bytes`` and ``decode(data, offset) -> datum``, made
once per schema. The output is byte for byte what fastavro writes, and the values
read are what fastavro reads (``tests/test_avrogen.py`` checks both on every schema of
the repository and on generated ones).

Covered: every primitive, records, enums, fixed, arrays, maps, named references and
unions of ``null`` with one other type. A schema with anything else (a logical type,
which fastavro turns into ``datetime`` or ``Decimal``; a wider union; a recursive
type) gets ``None``, and the serde keeps using fastavro for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from mwcore.serde.wire import HELPERS

Encode = Callable[[Any], bytes]
Decode = Callable[[bytes, int], Any]

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class Unsupported(Exception):
    """The schema uses something the generator does not cover."""


@dataclass(frozen=True)
class Codec:
    encode: Encode  # the Avro body of a datum
    decode: Decode  # the datum whose body starts at ``offset`` of ``data``
    source: str  # the generated module (for debugging)


# -- the generator ------------------------------------------------------------------------


class _Gen:
    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named  # full name -> definition, as fastavro parsed them
        self.consts: dict[str, Any] = {}
        self.n = 0
        self.expanding: set[str] = set()

    def var(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def const(self, value: Any) -> str:
        name = self.var("_c")
        self.consts[name] = value
        return name

    def resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            if schema in self.expanding:
                raise Unsupported(f"recursive type {schema}")
            try:
                return self.named[schema]
            except KeyError:
                raise Unsupported(f"unknown named type {schema}") from None
        if isinstance(schema, dict):
            if "logicalType" in schema:
                raise Unsupported(f"logical type {schema['logicalType']}")
            if schema.get("type") in _PRIMITIVES:
                return schema["type"]
        return schema

    @contextlib.contextmanager
    def expanding_named(self, schema: dict[str, Any]) -> Iterator[None]:
        """While a named type's code is generated, a reference to it is recursion."""
        if schema.get("type") not in ("record", "enum", "fixed"):
            yield
            return
        name = str(schema["name"])
        self.named.setdefault(name, schema)
        self.expanding.add(name)
        try:
            yield
        finally:
            self.expanding.discard(name)

    # -- reading: statements that set ``target`` from ``b`` at ``p`` ----------------------

    def read_varint(self, target: str, ind: str) -> list[str]:
        c = self.var("c")
        return [
            f"{ind}{c} = b[p]",
            f"{ind}p += 1",
            f"{ind}if {c} < 128:",
            f"{ind}    {target} = ({c} >> 1) ^ -({c} & 1)",
            f"{ind}elif b[p] < 128:",  # two bytes (up to 8191)
            f"{ind}    {c} = ({c} & 0x7F) | (b[p] << 7)",
            f"{ind}    p += 1",
            f"{ind}    {target} = ({c} >> 1) ^ -({c} & 1)",
            f"{ind}else:",
            f"{ind}    {c}, p = _varint_tail(b, p, {c})",
            f"{ind}    {target} = ({c} >> 1) ^ -({c} & 1)",
        ]

    def read_sized(self, target: str, ind: str, convert: str) -> list[str]:
        n = self.var("n")
        lines = self.read_varint(n, ind)
        lines += [
            f"{ind}if {n} < 0:",
            f"{ind}    raise ValueError('negative length')",
            f"{ind}{target} = b[p:p + {n}]{convert}",
            f"{ind}p += {n}",
            f"{ind}if p > len(b):",
            f"{ind}    raise Truncated('data ends early')",
        ]
        return lines

    def read(self, schema: Any, target: str, ind: str) -> list[str]:
        schema = self.resolve(schema)
        if isinstance(schema, list):
            return self.read_union(schema, target, ind)
        if isinstance(schema, str):
            if schema == "null":
                return [f"{ind}{target} = None"]
            if schema == "boolean":
                return [f"{ind}{target} = b[p] == 1", f"{ind}p += 1"]
            if schema in ("int", "long"):
                return self.read_varint(target, ind)
            if schema == "float":
                return [f"{ind}{target} = _unpack_f(b, p)[0]", f"{ind}p += 4"]
            if schema == "double":
                return [f"{ind}{target} = _unpack_d(b, p)[0]", f"{ind}p += 8"]
            if schema == "bytes":
                return self.read_sized(target, ind, "")
            if schema == "string":
                return self.read_sized(target, ind, ".decode()")
        kind = schema.get("type")
        with self.expanding_named(schema):
            if kind == "record":
                return self.read_record(schema, target, ind)
            if kind == "enum":
                idx = self.var("i")
                symbols = self.const(tuple(schema["symbols"]))
                return [
                    *self.read_varint(idx, ind),
                    f"{ind}if {idx} < 0:",
                    f"{ind}    raise ValueError('negative enum index')",
                    f"{ind}{target} = {symbols}[{idx}]",
                ]
            if kind == "fixed":
                size = int(schema["size"])
                return [
                    f"{ind}{target} = b[p:p + {size}]",
                    f"{ind}p += {size}",
                    f"{ind}if p > len(b):",
                    f"{ind}    raise Truncated('data ends early')",
                ]
            if kind in ("array", "map"):
                return self.read_blocks(schema, target, ind)
        raise Unsupported(f"type {schema!r}")

    def read_record(self, schema: dict[str, Any], target: str, ind: str) -> list[str]:
        lines: list[str] = []
        items = []
        for fld in schema["fields"]:
            v = self.var("v")
            lines += self.read(fld["type"], v, ind)
            items.append(f"{fld['name']!r}: {v}")
        lines.append(f"{ind}{target} = {{{', '.join(items)}}}")
        return lines

    def min_size(self, schema: Any) -> int:
        """The fewest bytes a value of ``schema`` takes (0: none, e.g. ``null``)."""
        try:
            schema = self.resolve(schema)
        except Unsupported:
            return 0
        if isinstance(schema, list):
            return 1  # the branch index
        if isinstance(schema, str):
            return {"null": 0, "float": 4, "double": 8}.get(schema, 1)
        kind = schema.get("type")
        if kind == "record":
            return sum(self.min_size(f["type"]) for f in schema["fields"])
        if kind == "fixed":
            return int(schema["size"])
        return 1  # enum, array, map

    def read_blocks(self, schema: dict[str, Any], target: str, ind: str) -> list[str]:
        is_map = schema["type"] == "map"
        n, k, item, skip = self.var("n"), self.var("k"), self.var("x"), self.var("s")
        # Items that take bytes are bounded by the data (it ends); items that take none
        # (array<null>) are bounded by a count: one record could claim 2**62 of them.
        counted = not is_map and self.min_size(schema["items"]) == 0
        total = self.var("t")
        lines = [f"{ind}{target} = {{}}" if is_map else f"{ind}{target} = []"]
        if counted:
            lines.append(f"{ind}{total} = 0")
        lines.append(f"{ind}while True:")
        inner = ind + "    "
        lines += self.read_varint(n, inner)
        lines += [
            f"{inner}if {n} == 0:",
            f"{inner}    break",
            f"{inner}if {n} < 0:",
            f"{inner}    {n} = -{n}",
        ]
        if counted:
            lines += [
                f"{inner}{total} += {n}",
                f"{inner}if {total} > _MAX_ITEMS:",
                f"{inner}    raise ValueError('more items than any record may hold')",
            ]
        lines += self.read_varint(skip, inner + "    ")
        lines.append(f"{inner}for _ in range({n}):")
        body = inner + "    "
        if is_map:
            lines += self.read("string", k, body)
            lines += self.read(schema["values"], item, body)
            lines.append(f"{body}{target}[{k}] = {item}")
        else:
            lines += self.read(schema["items"], item, body)
            lines.append(f"{body}{target}.append({item})")
        return lines

    def union_branches(self, schema: list[Any]) -> tuple[int, Any]:
        """(index of null, the other branch) of a ``[null, X]`` union."""
        resolved = [self.resolve(s) for s in schema]
        nulls = [i for i, s in enumerate(resolved) if s == "null"]
        if len(schema) != 2 or len(nulls) != 1:
            raise Unsupported("union other than null and one type")
        null_at = nulls[0]
        return null_at, schema[1 - null_at]

    def read_union(self, schema: list[Any], target: str, ind: str) -> list[str]:
        null_at, other = self.union_branches(schema)
        idx = self.var("u")
        lines = self.read_varint(idx, ind)
        lines += [
            f"{ind}if {idx} == {null_at}:",
            f"{ind}    {target} = None",
            f"{ind}elif {idx} == {1 - null_at}:",
        ]
        lines += self.read(other, target, ind + "    ")
        lines += [f"{ind}else:", f"{ind}    raise ValueError('union index out of range')"]
        return lines

    # -- writing: statements that append ``value`` to ``out`` -----------------------------

    def write(self, schema: Any, value: str, ind: str) -> list[str]:
        schema = self.resolve(schema)
        if isinstance(schema, list):
            null_at, other = self.union_branches(schema)
            lines = [f"{ind}if {value} is None:", f"{ind}    out.append({2 * null_at})", f"{ind}else:"]
            lines.append(f"{ind}    out.append({2 * (1 - null_at)})")
            return lines + self.write(other, value, ind + "    ")
        if isinstance(schema, str):
            if schema == "null":
                return [f"{ind}if {value} is not None:", f"{ind}    raise TypeError('expected None')"]
            if schema == "boolean":
                return [f"{ind}_write_boolean(out, {value})"]
            if schema == "int":
                return [f"{ind}_write_int(out, {value})"]
            if schema == "long":  # small values inline (zigzag fits one byte)
                z = self.var("z")
                return [
                    f"{ind}if -64 <= {value} < 64:",
                    f"{ind}    out.append(({value} << 1) ^ ({value} >> 63))",
                    f"{ind}elif -8192 <= {value} < 8192:",
                    f"{ind}    {z} = ({value} << 1) ^ ({value} >> 63)",
                    f"{ind}    out.append(({z} & 0x7F) | 0x80)",
                    f"{ind}    out.append({z} >> 7)",
                    f"{ind}else:",
                    f"{ind}    _write_long(out, {value})",
                ]
            if schema == "float":
                return [f"{ind}out += _pack_f({value})"]
            if schema == "double":
                return [f"{ind}out += _pack_d({value})"]
            if schema == "bytes":
                return [f"{ind}_write_bytes(out, {value})"]
            if schema == "string":  # short strings' lengths inline
                raw = self.var("w")
                return [
                    f"{ind}{raw} = {value}.encode()",
                    f"{ind}if len({raw}) < 64:",
                    f"{ind}    out.append(len({raw}) << 1)",
                    f"{ind}else:",
                    f"{ind}    _write_long(out, len({raw}))",
                    f"{ind}out += {raw}",
                ]
        kind = schema.get("type")
        with self.expanding_named(schema):
            if kind == "record":
                return self.write_record(schema, value, ind)
            if kind == "enum":
                index = self.const({s: i for i, s in enumerate(schema["symbols"])})
                return [f"{ind}_write_long(out, {index}[{value}])"]
            if kind == "fixed":
                size = int(schema["size"])
                return [
                    f"{ind}if len({value}) != {size}:",
                    f"{ind}    raise ValueError('fixed of size {size} expected')",
                    f"{ind}out += {value}",
                ]
            if kind in ("array", "map"):
                return self.write_blocks(schema, value, ind)
        raise Unsupported(f"type {schema!r}")

    def write_record(self, schema: dict[str, Any], value: str, ind: str) -> list[str]:
        lines: list[str] = []
        for fld in schema["fields"]:
            v = self.var("v")
            name = fld["name"]
            if "default" in fld:
                lines.append(f"{ind}{v} = {value}.get({name!r}, {self.const(fld['default'])})")
            elif self.is_nullable(fld["type"]):
                lines.append(f"{ind}{v} = {value}.get({name!r})")
            else:
                lines.append(f"{ind}{v} = {value}[{name!r}]")
            lines += self.write(fld["type"], v, ind)
        return lines

    def is_nullable(self, schema: Any) -> bool:
        return isinstance(schema, list) and any(self.resolve(s) == "null" for s in schema)

    def write_blocks(self, schema: dict[str, Any], value: str, ind: str) -> list[str]:
        item, k = self.var("x"), self.var("k")
        lines = [f"{ind}if {value}:", f"{ind}    _write_long(out, len({value}))"]
        if schema["type"] == "map":
            lines.append(f"{ind}    for {k}, {item} in {value}.items():")
            lines += self.write("string", k, ind + "        ")
            lines += self.write(schema["values"], item, ind + "        ")
        else:
            lines.append(f"{ind}    for {item} in {value}:")
            lines += self.write(schema["items"], item, ind + "        ")
        lines.append(f"{ind}out.append(0)")
        return lines


def _named_types(schema: Any, found: dict[str, Any]) -> dict[str, Any]:
    """Named definitions reachable from ``schema`` (fastavro keeps them beside it)."""
    if isinstance(schema, dict):
        for name, definition in schema.get("__named_schemas", {}).items():
            found.setdefault(name, definition)
    return found


def compile_codec(schema: Any, prefix: bytes = b"") -> Codec | None:
    """Encoder and decoder for a fastavro-parsed schema, or None if not covered. The
    encoder's output starts with ``prefix`` (the single-object header)."""
    gen = _Gen(_named_types(schema, {}))
    try:
        write = gen.write(schema, "d", "    ")
        read = gen.read(schema, "r", "    ")
    except (Unsupported, KeyError, TypeError, ValueError):
        return None
    source = "\n".join(
        [
            "def encode(d):",
            "    out = bytearray(_prefix)",
            *write,
            "    return bytes(out)",
            "",
            "def decode(b, p):",
            *read,
            "    return r",
            "",
        ]
    )
    namespace: dict[str, Any] = {**HELPERS, **gen.consts, "_prefix": prefix}
    name = schema.get("name", "") if isinstance(schema, dict) else str(schema)
    exec(compile(source, f"<avro codec {name}>", "exec"), namespace)
    return Codec(namespace["encode"], namespace["decode"], source)
