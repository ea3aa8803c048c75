"""The compatibility checker against Avro's resolution rules, and against fastavro.

Each case is a writer and a reader schema with the rule the checker must report (or
None). The same cases are then resolved by fastavro over data that takes every union
branch and enum symbol: the checker's verdict must be fastavro's (it refuses a pair
exactly when some datum of the writer fails to resolve).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import fastavro
import pytest

from mwcore.serde.avro import SchemaRegistry, _fingerprint
from mwcore.serde.compat import Rule, incompatibilities, shares_defaults, upgrade_refusal
from mwcore.serde.schema_doc import definitions, standalone

ROOT = Path(__file__).resolve().parents[3]


def rec(*fields: dict[str, Any], name: str = "t.R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


ENUM_AB = {"type": "enum", "name": "t.E", "symbols": ["A", "B"]}
ENUM_A = {"type": "enum", "name": "t.E", "symbols": ["A"]}
ENUM_A_DEFAULT = {"type": "enum", "name": "t.E", "symbols": ["A"], "default": "A"}
INNER = rec(f("x", "int"), name="t.Inner")
INNER_Y = rec(f("x", "int"), f("y", "string"), name="t.Inner")

# (id, writer, reader, the rule the checker reports, or None, and the path it names)
CASES: list[tuple[str, Any, Any, Rule | None, str]] = [
    ("same", rec(f("a", "int")), rec(f("a", "int")), None, ""),
    (
        "field added with default",
        rec(f("a", "int")),
        rec(f("a", "int"), f("b", "string", default="x")),
        None,
        "",
    ),
    (
        "field added, null default",
        rec(f("a", "int")),
        rec(f("a", "int"), f("b", ["null", "int"], default=None)),
        None,
        "",
    ),
    (
        "field added without default",
        rec(f("a", "int")),
        rec(f("a", "int"), f("b", "string")),
        Rule.FIELD_DEFAULT,
        "b",
    ),
    ("writer field dropped by reader", rec(f("a", "int"), f("b", "string")), rec(f("a", "int")), None, ""),
    ("field renamed with alias", rec(f("a", "int")), rec(f("z", "int", aliases=["a"])), None, ""),
    ("field renamed, no alias", rec(f("a", "int")), rec(f("z", "int")), Rule.FIELD_DEFAULT, "z"),
    ("fields reordered", rec(f("a", "int"), f("b", "long")), rec(f("b", "long"), f("a", "int")), None, ""),
    ("int to long", rec(f("a", "int")), rec(f("a", "long")), None, ""),
    ("int to float", rec(f("a", "int")), rec(f("a", "float")), None, ""),
    ("int to double", rec(f("a", "int")), rec(f("a", "double")), None, ""),
    ("long to float", rec(f("a", "long")), rec(f("a", "float")), None, ""),
    ("long to double", rec(f("a", "long")), rec(f("a", "double")), None, ""),
    ("float to double", rec(f("a", "float")), rec(f("a", "double")), None, ""),
    ("string to bytes", rec(f("a", "string")), rec(f("a", "bytes")), None, ""),
    ("bytes to string", rec(f("a", "bytes")), rec(f("a", "string")), None, ""),
    ("long to int", rec(f("a", "long")), rec(f("a", "int")), Rule.PROMOTION, "a"),
    ("double to float", rec(f("a", "double")), rec(f("a", "float")), Rule.PROMOTION, "a"),
    ("string to int", rec(f("a", "string")), rec(f("a", "int")), Rule.PROMOTION, "a"),
    (
        "logical type keeps its base",
        rec(f("a", {"type": "long", "logicalType": "timestamp-millis"})),
        rec(f("a", "long")),
        None,
        "",
    ),
    ("record to string", rec(f("a", INNER)), rec(f("a", "string")), Rule.PROMOTION, "a"),
    (
        "nested field added with default",
        rec(f("i", INNER)),
        rec(f("i", rec(f("x", "int"), f("y", "string", default=""), name="t.Inner"))),
        None,
        "",
    ),
    (
        "nested field added without default",
        rec(f("i", INNER)),
        rec(f("i", INNER_Y)),
        Rule.FIELD_DEFAULT,
        "i.y",
    ),
    (
        "nested record renamed",
        rec(f("i", INNER)),
        rec(f("i", rec(f("x", "int"), name="t.Other"))),
        Rule.NAME,
        "i",
    ),
    (
        "nested record renamed, alias",
        rec(f("i", INNER)),
        rec(f("i", rec(f("x", "int"), name="t.Other", aliases=["t.Inner"]))),
        None,
        "",
    ),
    ("namespace changed", rec(f("i", INNER)), rec(f("i", rec(f("x", "int"), name="u.Inner"))), None, ""),
    ("enum symbol added", rec(f("e", ENUM_A)), rec(f("e", ENUM_AB)), None, ""),
    ("enum symbol removed", rec(f("e", ENUM_AB)), rec(f("e", ENUM_A)), Rule.ENUM_SYMBOL, "e"),
    ("enum symbol removed, reader default", rec(f("e", ENUM_AB)), rec(f("e", ENUM_A_DEFAULT)), None, ""),
    (
        "fixed same size",
        rec(f("h", {"type": "fixed", "name": "t.H", "size": 4})),
        rec(f("h", {"type": "fixed", "name": "t.H", "size": 4})),
        None,
        "",
    ),
    (
        "fixed resized",
        rec(f("h", {"type": "fixed", "name": "t.H", "size": 4})),
        rec(f("h", {"type": "fixed", "name": "t.H", "size": 8})),
        Rule.FIXED_SIZE,
        "h",
    ),
    (
        "array items promoted",
        rec(f("a", {"type": "array", "items": "int"})),
        rec(f("a", {"type": "array", "items": "long"})),
        None,
        "",
    ),
    (
        "array items narrowed",
        rec(f("a", {"type": "array", "items": "long"})),
        rec(f("a", {"type": "array", "items": "int"})),
        Rule.PROMOTION,
        "a[]",
    ),
    (
        "array of records, field without default",
        rec(f("a", {"type": "array", "items": INNER})),
        rec(f("a", {"type": "array", "items": INNER_Y})),
        Rule.FIELD_DEFAULT,
        "a[].y",
    ),
    (
        "map values promoted",
        rec(f("m", {"type": "map", "values": "float"})),
        rec(f("m", {"type": "map", "values": "double"})),
        None,
        "",
    ),
    (
        "map values changed",
        rec(f("m", {"type": "map", "values": "string"})),
        rec(f("m", {"type": "map", "values": "long"})),
        Rule.PROMOTION,
        "m{}",
    ),
    (
        "array to map",
        rec(f("a", {"type": "array", "items": "int"})),
        rec(f("a", {"type": "map", "values": "int"})),
        Rule.PROMOTION,
        "a",
    ),
    ("value made optional", rec(f("a", "int")), rec(f("a", ["null", "int"], default=None)), None, ""),
    ("optional made required", rec(f("a", ["null", "int"])), rec(f("a", "int")), Rule.UNION, "a"),
    ("union branch added", rec(f("a", ["null", "int"])), rec(f("a", ["null", "int", "string"])), None, ""),
    (
        "union branch removed",
        rec(f("a", ["null", "int", "string"])),
        rec(f("a", ["null", "int"])),
        Rule.UNION,
        "a",
    ),
    (
        "union reordered",
        rec(f("a", ["null", "string", "int"])),
        rec(f("a", ["int", "null", "string"])),
        None,
        "",
    ),
    ("union branch promoted", rec(f("a", ["null", "int"])), rec(f("a", ["null", "long"])), None, ""),
    ("writer single type into reader union", rec(f("a", "int")), rec(f("a", ["null", "long"])), None, ""),
    ("reader union lacks writer type", rec(f("a", "string")), rec(f("a", ["null", "int"])), Rule.UNION, "a"),
    (
        "union of records, field without default",
        rec(f("a", ["null", INNER])),
        rec(f("a", ["null", INNER_Y])),
        Rule.FIELD_DEFAULT,
        "a.y",
    ),
    (
        "named reference reused",
        rec(f("i", INNER), f("j", "t.Inner")),
        rec(f("i", INNER), f("j", "t.Inner")),
        None,
        "",
    ),
    (
        "recursive type",
        rec(f("v", "int"), f("next", ["null", "t.R"], default=None)),
        rec(f("v", "long"), f("next", ["null", "t.R"], default=None)),
        None,
        "",
    ),
    ("top-level record renamed", rec(f("a", "int")), rec(f("a", "int"), name="t.S"), Rule.NAME, ""),
]


def parsed(schema: Any) -> Any:
    return standalone(fastavro.parse_schema(schema, named_schemas={}), {})


@pytest.mark.parametrize(
    ("writer", "reader", "rule", "path"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_checker_names_the_rule_and_the_field(writer: Any, reader: Any, rule: Rule | None, path: str) -> None:
    found = incompatibilities(parsed(reader), parsed(writer))
    if rule is None:
        assert found == []
    else:
        assert found, "compatible, expected " + rule.name
        assert (found[0].rule, found[0].path) == (rule, path), found


def samples(schema: Any, named: dict[str, Any], k: int, depth: int = 0) -> Any:
    """The ``k``-th sample datum of a schema: union branch and enum symbol ``k`` (mod
    their count), so that k = 0..3 takes every branch of the cases above."""
    if isinstance(schema, str) and schema in named:
        schema = named[schema]
    if isinstance(schema, list):
        branches = [b for b in schema if depth < 3 or b == "null"] or schema
        return samples(branches[k % len(branches)], named, k, depth + 1)
    kind = schema["type"] if isinstance(schema, dict) else schema
    if isinstance(kind, dict | list):
        return samples(kind, named, k, depth)
    values = {"null": None, "boolean": True, "int": 7, "long": 7, "float": 1.5, "double": 1.5}
    if kind in values:
        return values[kind]
    if kind == "string":
        return "s"
    if kind == "bytes":
        return b"b"
    if kind == "fixed":
        return b"\x01" * schema["size"]
    if kind == "enum":
        return schema["symbols"][k % len(schema["symbols"])]
    if kind == "array":
        return [samples(schema["items"], named, k, depth + 1)]
    if kind == "map":
        return {"k": samples(schema["values"], named, k, depth + 1)}
    return {fd["name"]: samples(fd["type"], named, k, depth + 1) for fd in schema["fields"]}


def fastavro_reads_all(writer: Any, reader: Any) -> bool:
    w = fastavro.parse_schema(writer, named_schemas={})
    r = fastavro.parse_schema(reader, named_schemas={})
    named = definitions(parsed(writer))
    for k in range(4):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, w, samples(parsed(writer), named, k))
        buf.seek(0)
        try:
            fastavro.schemaless_reader(buf, w, r)
        except Exception:
            return False
    return True


@pytest.mark.parametrize(("writer", "reader", "rule"), [c[1:4] for c in CASES], ids=[c[0] for c in CASES])
def test_checker_agrees_with_fastavro(writer: Any, reader: Any, rule: Rule | None) -> None:
    assert fastavro_reads_all(writer, reader) == (rule is None)


V1 = rec(f("key", "string"), f("n", "long"), name="zeitgeist.Count", version=1)
V2 = rec(
    f("key", "string"), f("n", "long"), f("unit", "string", default="one"), name="zeitgeist.Count", version=2
)


def test_refusals_say_which_version_breaks_which_rule_in_one_line() -> None:
    v3_removes = rec(
        f("key", "string"), f("unit", "string", default="one"), name="zeitgeist.Count", version=3
    )
    assert upgrade_refusal("zeitgeist.Count", "v3", parsed(v3_removes), "v2", parsed(V2)) == (
        "schema zeitgeist.Count v3 removes field 'n' that has no default: a reader of v2 cannot read it "
        "(Avro: reader field without default missing in writer)"
    )
    v2_adds = rec(f("key", "string"), f("n", "long"), f("unit", "string"), name="zeitgeist.Count", version=2)
    assert upgrade_refusal("zeitgeist.Count", "v2", parsed(v2_adds), "v1", parsed(V1)) == (
        "schema zeitgeist.Count v2 adds field 'unit' without a default: v2 cannot read data written "
        "with v1 (Avro: reader field without default missing in writer)"
    )
    narrowed = rec(f("key", "string"), f("n", "int"), name="zeitgeist.Count", version=2)
    refusal = upgrade_refusal("zeitgeist.Count", "v2", parsed(narrowed), "v1", parsed(V1))
    assert refusal is not None
    assert refusal.startswith(
        "schema zeitgeist.Count v2 changes field 'n' from long to int: v2 cannot read data written with v1 "
        "(Avro: a reader type must be the writer's or a promotion of it"
    )
    enum_v1 = rec(f("kind", ENUM_A), name="t.K", version=1)
    enum_v2 = rec(f("kind", ENUM_AB), name="t.K", version=2)
    assert upgrade_refusal("t.K", "v2", parsed(enum_v2), "v1", parsed(enum_v1)) == (
        "schema t.K v2 adds symbol(s) B to field 'kind' (enum t.E): a reader of v1 cannot read it "
        "(Avro: writer enum symbol missing in reader, and the reader enum has no default)"
    )
    assert "\n" not in refusal


def test_both_directions_are_required() -> None:
    assert upgrade_refusal("zeitgeist.Count", "v2", parsed(V2), "v1", parsed(V1)) is None
    assert upgrade_refusal("zeitgeist.Count", "v1", parsed(V1), "v2", parsed(V2)) is None
    widened = rec(f("key", "string"), f("n", "double"), name="zeitgeist.Count", version=2)
    # v2 reads v1 (long promotes to double), but a reader of v1 cannot read doubles
    assert incompatibilities(parsed(widened), parsed(V1)) == []
    refusal = upgrade_refusal("zeitgeist.Count", "v2", parsed(widened), "v1", parsed(V1))
    assert refusal is not None and "changes field 'n' from long to double: a reader of v1" in refusal


def test_a_document_has_the_schemas_fingerprint_and_inlines_types_of_other_files() -> None:
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    for name in registry.names():
        sv = registry.latest(name)
        alone = fastavro.parse_schema(sv.document, named_schemas={})
        assert _fingerprint(alone) == sv.fingerprint, name
    reg = SchemaRegistry()
    reg.add({"type": "enum", "name": "Kind", "namespace": "t", "symbols": ["A"]})
    sv = reg.add(rec(f("k", "t.Kind"), f("again", "t.Kind"), name="t.Uses", version=4))
    assert sv.document["fields"][0]["type"] == {"type": "enum", "name": "t.Kind", "symbols": ["A"]}
    assert sv.document["fields"][1]["type"] == "t.Kind"
    assert sv.document["version"] == 4
    assert _fingerprint(fastavro.parse_schema(sv.document, named_schemas={})) == sv.fingerprint
    # the fingerprint the kit gave such a schema before (other files' types left out)
    assert reg.by_fingerprint(_fingerprint(sv.parsed)) is sv


@pytest.mark.parametrize(
    ("schema", "shares"),
    [
        (rec(f("a", "long", default=0), f("b", ["null", "string"], default=None)), False),
        (rec(f("a", {"type": "array", "items": "long"}, default=[])), True),
        (rec(f("a", {"type": "map", "values": "long"}, default={})), True),
        (rec(f("a", rec(f("z", "string"), name="t.Z"), default={"z": "eu"})), True),
        # nested: a record in an array whose field's default is a list
        (
            rec(
                f(
                    "a",
                    {
                        "type": "array",
                        "items": rec(f("l", {"type": "array", "items": "long"}, default=[]), name="t.I"),
                    },
                )
            ),
            True,
        ),
        # a recursive record without mutable defaults: walked once
        (rec(f("n", ["null", "t.R"], default=None)), False),
    ],
)
def test_what_an_older_writer_can_share_of_the_readers_defaults(schema: dict[str, Any], shares: bool) -> None:
    """Read with an older writer, fastavro hands each value the reader's default object:
    ``AvroSerde.decode`` copies the value where one is mutable, and only there."""
    assert shares_defaults(fastavro.parse_schema(schema)) is shares
