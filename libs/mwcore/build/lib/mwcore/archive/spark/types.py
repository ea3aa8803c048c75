"""Avro schemas as Spark types, and Avro data as Spark rows."""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
)

PRIMITIVES: dict[str, DataType] = {
    "null": NullType(),
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}


def spark_type(avro: Any, named: dict[str, Any] | None = None) -> tuple[DataType, bool]:
    """The Spark type of an Avro (fastavro-parsed) type, and whether it is nullable."""
    named = {} if named is None else named
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise ValueError(f"unions other than [null, T] are not supported: {avro}")
        t, _ = spark_type(branches[0], named)
        return t, True
    if isinstance(avro, str):
        if avro in PRIMITIVES:
            return PRIMITIVES[avro], avro == "null"
        return spark_type(named[avro], named)
    kind = avro["type"]
    if kind in ("record", "enum", "fixed") and "name" in avro:
        named[avro["name"]] = avro
    if kind == "record":
        return struct_of(avro, named), False
    if kind == "enum":
        return StringType(), False
    if kind == "fixed":
        return BinaryType(), False
    if kind == "array":
        item, nullable = spark_type(avro["items"], named)
        return ArrayType(item, nullable), False
    if kind == "map":
        value, nullable = spark_type(avro["values"], named)
        return MapType(StringType(), value, nullable), False
    return spark_type(kind, named)


def struct_of(record: Any, named: dict[str, Any] | None = None) -> StructType:
    named = {} if named is None else named
    fields = []
    for f in record["fields"]:
        t, nullable = spark_type(f["type"], named)
        fields.append(StructField(f["name"], t, nullable))
    return StructType(fields)


def to_row(value: Any, t: DataType) -> Any:
    """An Avro datum as the Python value Spark expects for type ``t``."""
    if value is None:
        return None
    if isinstance(t, StructType):
        return tuple(to_row(value.get(f.name), f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return [to_row(v, t.elementType) for v in value]
    if isinstance(t, MapType):
        return {k: to_row(v, t.valueType) for k, v in value.items()}
    return value
