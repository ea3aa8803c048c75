"""The plan of the native core's Avro codec (``mwcore_native.Decoder`` and ``Encoder``):
what the generated codec's ``read`` and ``write`` walk (``codegen.py``), as data. A
schema the generated codec does not cover has no plan either.
"""

from __future__ import annotations

from typing import Any

from mwcore.serde.codegen import _PRIMITIVES, Unsupported, _Gen, _named_types


class _Planner(_Gen):
    def plan(self, schema: Any) -> tuple[Any, ...]:
        """``schema`` as nested tuples, for ``mwcore_native.Decoder`` and ``Encoder``:
        ``(kind, ...)`` with kind ``null``, ``boolean``, ``int``, ``long``, ``float``,
        ``double``, ``bytes``, ``string``, ``("record", ((name, plan, nullable), ...))``
        (``nullable``: a missing field is written as null; else the generated code
        decides: a default, or an error), ``("enum", symbols)``, ``("fixed", size)``,
        ``("array", plan, counted)``, ``("map", plan)``, ``("union", null_at, plan)``."""
        schema = self.resolve(schema)
        if isinstance(schema, list):
            null_at, other = self.union_branches(schema)
            return ("union", null_at, self.plan(other))
        if isinstance(schema, str):
            if schema not in _PRIMITIVES:
                raise Unsupported(f"type {schema!r}")
            return (schema,)
        kind = schema.get("type")
        with self.expanding_named(schema):
            if kind == "record":
                return (
                    "record",
                    tuple(
                        (
                            str(f["name"]),
                            self.plan(f["type"]),
                            "default" not in f and self.is_nullable(f["type"]),
                        )
                        for f in schema["fields"]
                    ),
                )
            if kind == "enum":
                return ("enum", tuple(str(s) for s in schema["symbols"]))
            if kind == "fixed":
                return ("fixed", int(schema["size"]))
            if kind == "array":
                return ("array", self.plan(schema["items"]), self.min_size(schema["items"]) == 0)
            if kind == "map":
                return ("map", self.plan(schema["values"]))
        raise Unsupported(f"type {schema!r}")


def native_plan(schema: Any) -> tuple[Any, ...] | None:
    """The plan of the native codec of a fastavro-parsed schema (``_Gen.plan``), or
    None where the generated codec does not cover it either."""
    try:
        return _Planner(_named_types(schema, {})).plan(schema)
    except (Unsupported, KeyError, TypeError, ValueError):
        return None
