"""Example values of Avro schemas: a starting point for a test's input."""

from __future__ import annotations

from typing import Any

from mwcore.serde.avro import SchemaRegistry


def example_value(registry: SchemaRegistry, schema: str) -> Any:
    """A valid value of the named Avro record schema (zeros, empty strings, the first
    enum symbol, the first branch of a union, field defaults where given): a starting
    point for a test's input."""
    named: dict[str, Any] = {}

    def make(t: Any, ns: str) -> Any:
        if isinstance(t, list):
            return make(t[0], ns)
        if isinstance(t, str):
            full = t if "." in t else f"{ns}.{t}" if ns else t
            if full in named or t in named:
                return make(named.get(full, named.get(t)), ns)
            return {
                "null": None,
                "boolean": False,
                "int": 0,
                "long": 0,
                "float": 0.0,
                "double": 0.0,
                "bytes": b"",
                "string": "",
            }[t]
        kind = t["type"]
        if kind in ("record", "enum", "fixed"):
            space = t.get("namespace", ns)
            named[f"{space}.{t['name']}" if space else t["name"]] = t
        if kind == "record":
            space = t.get("namespace", ns)
            return {
                f["name"]: f["default"] if "default" in f else make(f["type"], space) for f in t["fields"]
            }
        if kind == "enum":
            return t["symbols"][0]
        if kind == "fixed":
            return bytes(t["size"])
        if kind == "array":
            return []
        if kind == "map":
            return {}
        return make(kind, ns)

    return make(registry.latest(schema).parsed, "")
