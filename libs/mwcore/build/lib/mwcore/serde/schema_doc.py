"""A schema as one self-contained JSON document: what the schemas topic carries.

fastavro's parsed form refers by full name to named types defined elsewhere (in
another ``.avsc`` file). A document inlines each named type where it is first used and
refers to it by name after that, as Avro's parsing canonical form does, but keeps what
the canonical form drops and schema resolution needs: defaults, aliases, docs, and the
``version`` attribute. Parsed on its own, a document has the schema's fingerprint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})


def _clean(d: Mapping[str, Any]) -> dict[str, Any]:
    """Without fastavro's bookkeeping keys (``__fastavro_parsed``, ``__named_schemas``)."""
    return {k: v for k, v in d.items() if not k.startswith("__")}


def standalone(parsed: Any, named: Mapping[str, Any]) -> Any:
    """``parsed`` (fastavro's form) with every named type it uses from ``named`` inlined
    at its first use."""
    emitted: set[str] = set()

    def walk(s: Any) -> Any:
        if isinstance(s, str):
            if s in PRIMITIVES or s in emitted or s not in named:
                return s
            return walk(named[s])
        if isinstance(s, list):
            return [walk(branch) for branch in s]
        if not isinstance(s, dict):
            return s
        out = _clean(s)
        kind = out.get("type")
        if kind in NAMED:
            if out["name"] in emitted:
                return out["name"]
            emitted.add(out["name"])  # before the fields: a record may refer to itself
            if kind in ("record", "error"):
                out["fields"] = [{**_clean(f), "type": walk(f["type"])} for f in out["fields"]]
        elif kind == "array":
            out["items"] = walk(out["items"])
        elif kind == "map":
            out["values"] = walk(out["values"])
        elif isinstance(kind, dict | list) or (isinstance(kind, str) and kind not in PRIMITIVES):
            out["type"] = walk(kind)
        return out

    return walk(parsed)


def definitions(schema: Any) -> dict[str, dict[str, Any]]:
    """Every named type a self-contained schema defines, by full name."""
    found: dict[str, dict[str, Any]] = {}

    def walk(s: Any) -> None:
        if isinstance(s, list):
            for branch in s:
                walk(branch)
        elif isinstance(s, dict):
            kind = s.get("type")
            if kind in NAMED:
                if s["name"] in found:
                    return
                found[s["name"]] = s
                for f in s.get("fields", ()):
                    walk(f["type"])
            elif kind == "array":
                walk(s["items"])
            elif kind == "map":
                walk(s["values"])
            elif isinstance(kind, dict | list):
                walk(kind)

    walk(schema)
    return found


def sizeless_array(document: Any) -> str | None:
    """An array in ``document`` (self-contained) whose items take no bytes (``null``, a
    record of nulls, a fixed of size 0), described; None if there is none. A record of
    such a schema could claim 2**62 items in a few bytes, and no decoder's loop over
    them would end: such schemas are refused."""
    named = definitions(document)
    found: list[str] = []

    def size(s: Any, seen: frozenset[str]) -> int:
        if isinstance(s, str):
            if s in PRIMITIVES:
                return {"null": 0, "float": 4, "double": 8}.get(s, 1)
            if s in seen or s not in named:
                return 1
            return size(named[s], seen | {s})
        if isinstance(s, list):
            return 1
        if not isinstance(s, dict):
            return 1
        kind = s.get("type")
        if isinstance(kind, dict | list) or kind in PRIMITIVES:
            return size(kind, seen)
        if kind in ("record", "error"):
            inner = seen | {s["name"]}
            return sum(size(f["type"], inner) for f in s.get("fields", ()))
        if kind == "fixed":
            return int(s.get("size", 1))
        return 1  # enum, array, map: at least one byte each

    def walk(s: Any, seen: frozenset[str]) -> None:
        if isinstance(s, str):
            if s in named and s not in seen:
                walk(named[s], seen | {s})
        elif isinstance(s, list):
            for branch in s:
                walk(branch, seen)
        elif isinstance(s, dict):
            kind = s.get("type")
            if kind == "array":
                if size(s["items"], seen) == 0:
                    found.append(f"array of {s['items']!r:.60}")
                walk(s["items"], seen)
            elif kind == "map":
                walk(s["values"], seen)
            elif kind in ("record", "error"):
                for f in s.get("fields", ()):
                    walk(f["type"], seen | {s["name"]})
            elif isinstance(kind, dict | list):
                walk(kind, seen)

    walk(document, frozenset())
    return found[0] if found else None
