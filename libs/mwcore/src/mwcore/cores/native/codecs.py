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


def decoding(serde: AvroSerde) -> Callable[[bytes], Any]:
    """``serde.decode``, on the native core."""
    sv = serde.schema
    plan = native_plan(sv.parsed)
    if plan is None:  # nor has the serde a generated codec: fastavro reads it
        return serde.decode
    return rust.Decoder(plan, serde.header, MAX_AVRO_ITEMS, serde.decode).decode


def encoding(serde: AvroSerde) -> Callable[[Any], bytes]:
    """``serde.encode``, on the native core."""
    plan = native_plan(serde.schema.parsed)
    if plan is None:
        return serde.encode
    return rust.Encoder(plan, serde.header, serde.encode).encode
