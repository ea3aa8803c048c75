"""The Avro codecs of a worker's inputs and outputs on the native core.

Each wraps the serde it stands for: values of the schema's own writer are decoded,
and values whose parts have exactly the types the schema reads back are encoded, in
Rust (``serde/avro.rs``, ``serde/encode.rs``), by a plan of the schema
(``serde/native_plan.py``: the walk the generated codec makes); anything
else goes to the serde, which reads or writes it or raises its own error. So values,
bytes and errors (a dead letter's text) are the same on both cores
(``libs/mwcore/tests/test_native.py`` holds them to it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mwcore.cores.native import rust
from mwcore.limits import MAX_AVRO_ITEMS
from mwcore.serde.avro import AvroSerde
from mwcore.serde.native_plan import native_plan
from mwcore.serde.record_types import classes
from mwcore.serde.typed import Typed
from mwcore.serde.typed import decoding as decoding_typed
from mwcore.serde.typed import encoding as encoding_typed


def decoding(serde: AvroSerde, typed: Typed | None = None) -> Callable[[bytes], Any]:
    """``serde.decode``, on the native core (into ``typed``'s type, where given: made in
    Rust where every record type in it is a plain dataclass, ``serde/record_types.py: classes``;
    else by its reader, called from Rust on each value decoded)."""
    fallback = serde.decode if typed is None else decoding_typed(serde.decode, typed.read)
    plan = native_plan(serde.schema.parsed)
    if plan is None:  # nor has the serde a generated codec: fastavro reads it
        return fallback
    make = None
    if typed is not None:
        made = classes(plan, typed.type)
        plan, make = (plan, typed.read) if made is None else (made, None)
    return rust.Decoder(plan, serde.header, MAX_AVRO_ITEMS, fallback, make).decode


def encoding(serde: AvroSerde, typed: Typed | None = None) -> Callable[[Any], bytes]:
    """``serde.encode``, on the native core (from ``typed``'s type too: instances of plain
    dataclasses written from their ``__dict__`` in Rust, else made dicts first)."""
    fallback = serde.encode if typed is None else encoding_typed(serde.encode, typed.write)
    plan = native_plan(serde.schema.parsed)
    if plan is None:
        return fallback
    if typed is None:
        return rust.Encoder(plan, serde.header, fallback).encode
    made = classes(plan, typed.type)
    if made is None:
        return encoding_typed(rust.Encoder(plan, serde.header, serde.encode).encode, typed.write)
    return rust.Encoder(made, serde.header, fallback).encode
