"""Can a reader schema read what a writer schema wrote? Avro's schema resolution rules.

``incompatibilities(reader, writer)`` lists every place where the specification's
resolution rules (and fastavro, which resolves at run time) refuse some datum of the
writer: a reader field without a default that the writer lacks, a type that is
neither the writer's nor a promotion of it, a writer enum symbol the reader lacks
(unless the reader enum has a default), named types whose unqualified names differ
(unless the reader has an alias), fixed types of other sizes, a writer union branch
the reader cannot take. Unions are checked per branch, as resolution picks the
first reader branch that matches the writer's. Schemas are in fastavro's parsed
form and self-contained (``schema_doc.standalone``).

``upgrade_refusal`` turns them into the one line that refuses a new writer schema
beside an earlier version of the same named schema: in a rolling upgrade both
directions must read, old readers the new data and new readers the old data.

The Apache Avro Python package has a port of Java's checker (``avro.compatibility``);
this one is kept here because its verdicts must be fastavro's (the resolver the kit
runs: record names compared unqualified, the first matching union branch, enum
defaults) and its findings carry field paths, from which the refusal names the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from mwcore.serde.schema_doc import NAMED, PRIMITIVES, definitions

PROMOTIONS = frozenset(
    {
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "float"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    }
)  # (writer, reader)


class Rule(Enum):
    """The resolution rule a finding breaks; the value is how a refusal names it."""

    FIELD_DEFAULT = "reader field without default missing in writer"
    PROMOTION = (
        "a reader type must be the writer's or a promotion of it: int to long, float or "
        "double; long to float or double; float to double; string to bytes and back"
    )
    ENUM_SYMBOL = "writer enum symbol missing in reader, and the reader enum has no default"
    NAME = "named types resolve only by the same unqualified name, or a reader alias"
    FIXED_SIZE = "fixed types must have the same size"
    UNION = "every writer union branch must match a reader type"


@dataclass(frozen=True, slots=True)
class Incompatibility:
    rule: Rule
    path: str  # the field: dotted, "[]" for array items, "{}" for map values; "" for the schema
    reader: str  # the reader's type there
    writer: str  # the writer's type there ("absent": it has no such field)
    symbols: tuple[str, ...] = ()  # ENUM_SYMBOL: the writer's symbols the reader lacks


def incompatibilities(reader: Any, writer: Any) -> list[Incompatibility]:
    """Every way ``reader`` fails to read data written with ``writer`` (empty: it reads
    all of it)."""
    return _Check(reader, writer).run()


def upgrade_refusal(name: str, new_label: str, new: Any, old_label: str, old: Any) -> str | None:
    """Why writer schema ``new`` may not join ``old`` (an earlier version of ``name``
    already written), in one line; None if each reads the other."""
    for inc in incompatibilities(reader=old, writer=new):
        return _refusal(name, new_label, old_label, inc, old_reads_new=True)
    for inc in incompatibilities(reader=new, writer=old):
        return _refusal(name, new_label, old_label, inc, old_reads_new=False)
    return None


def _refusal(name: str, new: str, old: str, inc: Incompatibility, *, old_reads_new: bool) -> str:
    if old_reads_new:
        old_type, new_type = inc.reader, inc.writer
        consequence = f"a reader of {old} cannot read it"
    else:
        old_type, new_type = inc.writer, inc.reader
        consequence = f"{new} cannot read data written with {old}"
    where = f"field '{inc.path}'" if inc.path else "the schema"
    symbols = ", ".join(inc.symbols)
    if inc.rule is Rule.FIELD_DEFAULT:
        change = (
            f"removes field '{inc.path}' that has no default"
            if old_reads_new
            else f"adds field '{inc.path}' without a default"
        )
    elif inc.rule is Rule.ENUM_SYMBOL:
        change = (
            f"adds symbol(s) {symbols} to {where} ({new_type})"
            if old_reads_new
            else f"removes symbol(s) {symbols} from {where} ({new_type})"
        )
    elif inc.rule is Rule.NAME:
        change = f"renames {where} from {old_type} to {new_type}"
    else:
        change = f"changes {where} from {old_type} to {new_type}"
    return f"schema {name} {new} {change}: {consequence} (Avro: {inc.rule.value})"


def shares_defaults(schema: Any) -> bool:
    """Whether reading with an older writer can hand out a default of ``schema`` (the
    reader) itself: fastavro puts a field's default object into each value that lacks
    the field, so a mutable one (a list, a map, a record) must be copied per value."""
    seen: set[str] = set()

    def walk(t: Any) -> bool:
        if isinstance(t, list):
            return any(walk(branch) for branch in t)
        if not isinstance(t, dict):
            return False
        kind = t.get("type")
        if kind == "record" or kind == "error":
            if t.get("name") in seen:
                return False
            seen.add(t.get("name", ""))
            return any(
                isinstance(f.get("default"), (list, dict)) or walk(f.get("type")) for f in t.get("fields", [])
            )
        if kind == "array":
            return walk(t.get("items"))
        if kind == "map":
            return walk(t.get("values"))
        return walk(kind) if isinstance(kind, (dict, list)) else False

    return walk(schema)


def describe(schema: Any, named: dict[str, dict[str, Any]]) -> str:
    """A short name of a type: ``long``, ``array<string>``, ``[null, record a.B]``."""
    s = _resolve(schema, named)
    if isinstance(s, list):
        return "[" + ", ".join(describe(b, named) for b in s) + "]"
    kind = _kind(s)
    if kind in PRIMITIVES:
        return kind
    if kind == "array":
        return f"array<{describe(s['items'], named)}>"
    if kind == "map":
        return f"map<{describe(s['values'], named)}>"
    if kind == "fixed":
        return f"fixed {s['name']}({s['size']})"
    return f"{kind} {s['name']}"


def _resolve(schema: Any, named: dict[str, dict[str, Any]]) -> Any:
    """A named reference as its definition; ``{"type": "long", ...}`` as ``"long"``."""
    if isinstance(schema, str):
        return named.get(schema, schema)
    if isinstance(schema, dict) and schema.get("type") in PRIMITIVES:
        return schema["type"]  # logical types resolve as their underlying type
    if isinstance(schema, dict) and isinstance(schema.get("type"), dict | list):
        return _resolve(schema["type"], named)
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema
    kind = schema["type"]
    return "record" if kind == "error" else str(kind)


def _unqualified(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names_match(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    aliases = reader.get("aliases") or ()
    w_name = writer["name"]
    return (
        _unqualified(reader["name"]) == _unqualified(w_name)
        or w_name in aliases
        or _unqualified(w_name) in aliases
    )


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class _Check:
    def __init__(self, reader: Any, writer: Any) -> None:
        self.reader, self.writer = reader, writer
        self.r_named = definitions(reader)
        self.w_named = definitions(writer)
        self.found: list[Incompatibility] = []
        self.records: set[tuple[str, str]] = set()  # pairs checked or being checked (recursion)

    def run(self) -> list[Incompatibility]:
        self.check(self.reader, self.writer, "")
        return self.found

    def _add(self, rule: Rule, path: str, r: Any, w: Any, symbols: tuple[str, ...] = ()) -> None:
        reader, writer = describe(r, self.r_named), describe(w, self.w_named)
        self.found.append(Incompatibility(rule, path, reader, writer, symbols))

    def matches(self, r: Any, w: Any) -> bool:
        """Whether resolution would pick reader branch ``r`` for writer type ``w``
        (fastavro's ``match_types``: the same kind, or a promotion; named types by name)."""
        r, w = _resolve(r, self.r_named), _resolve(w, self.w_named)
        if isinstance(r, list) or isinstance(w, list):
            return True
        rk, wk = _kind(r), _kind(w)
        if rk in PRIMITIVES or wk in PRIMITIVES:
            return rk == wk or (wk, rk) in PROMOTIONS
        if rk != wk:
            return False
        if rk == "array":
            return self.matches(r["items"], w["items"])
        if rk == "map":
            return self.matches(r["values"], w["values"])
        if rk == "fixed" and r["size"] != w["size"]:
            return False
        return _names_match(r, w)

    def check(self, r: Any, w: Any, path: str) -> None:
        r, w = _resolve(r, self.r_named), _resolve(w, self.w_named)
        if isinstance(w, list):
            for branch in w:
                if isinstance(r, list) or self.matches(r, branch):
                    self.check(r, branch, path)
                else:
                    self._add(Rule.UNION, path, r, w)
                    return
            return
        if isinstance(r, list):
            chosen = next((b for b in r if self.matches(b, w)), None)
            if chosen is None:
                self._add(Rule.UNION, path, r, w)
            else:
                self.check(chosen, w, path)
            return
        rk, wk = _kind(r), _kind(w)
        if rk != wk:
            if (wk, rk) not in PROMOTIONS:
                self._add(Rule.PROMOTION, path, r, w)
            return
        if rk in PRIMITIVES:
            return
        if rk == "array":
            self.check(r["items"], w["items"], path + "[]")
        elif rk == "map":
            self.check(r["values"], w["values"], path + "{}")
        elif rk in NAMED:
            self._check_named(r, w, path)

    def _check_named(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        if not _names_match(r, w):
            self._add(Rule.NAME, path, r, w)
            return
        kind = _kind(r)
        if kind == "fixed":
            if r["size"] != w["size"]:
                self._add(Rule.FIXED_SIZE, path, r, w)
        elif kind == "enum":
            missing = tuple(s for s in w["symbols"] if s not in r["symbols"])
            if missing and not r.get("default"):
                self._add(Rule.ENUM_SYMBOL, path, r, w, missing)
        else:
            pair = (r["name"], w["name"])
            if pair in self.records:
                return
            self.records.add(pair)
            self._check_fields(r, w, path)

    def _check_fields(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        w_fields = {f["name"]: f for f in w["fields"]}
        for field in r["fields"]:
            at = _join(path, field["name"])
            w_field = w_fields.get(field["name"])
            if w_field is None:
                aliases = [a for a in field.get("aliases") or () if a in w_fields]
                w_field = w_fields[aliases[0]] if aliases else None
            if w_field is not None:
                self.check(field["type"], w_field["type"], at)
            elif "default" not in field:
                reader = describe(field["type"], self.r_named)
                self.found.append(Incompatibility(Rule.FIELD_DEFAULT, at, reader, "absent"))
