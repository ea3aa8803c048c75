"""Decoding a value written with an older schema version (``AvroSerde.decode``), with
and without the copy of each value that protects a reader schema's shared defaults.

Run: ``.venv/bin/python bench/older_writer.py [--rounds 5] [--values 100000]``; prints a
line a round and JSON (the last line).

A reader schema v2 adds a field with a default to v1, and each value is written with
v1, as in a rolling upgrade whose producers lag. fastavro hands every value the
default object of the reader schema itself, so a mutable default (a list, a map, a
record) must be copied per value; a scalar one need not. ``copy_every_value`` is what
``decode`` did before (a deepcopy of every value read with an older writer),
``copy_where_shared`` what it does now (``compat.shares_defaults``): both timed in
each round, alternately, on a scalar default (a mutable one is copied by both).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mwcore.serde.avro import AvroSerde, SchemaRegistry

V1 = {
    "type": "record",
    "name": "Q",
    "namespace": "t",
    "version": 1,
    "fields": [{"name": "query", "type": "string"}, {"name": "n", "type": "long"}],
}
ADDED = {"scalar": {"name": "lang", "type": "string", "default": "en"}}


def serdes(added: dict[str, Any]) -> tuple[AvroSerde, bytes]:
    old = SchemaRegistry()
    old.add(V1)
    both = SchemaRegistry()
    both.add(V1)
    both.add({**V1, "version": 2, "fields": [*V1["fields"], added]})
    return AvroSerde(both, "t.Q"), AvroSerde(old, "t.Q").encode({"query": "weather", "n": 3})


def per_value_us(decode: Callable[[], Any], values: int) -> float:
    t0 = time.perf_counter()
    for _ in range(values):
        decode()
    return (time.perf_counter() - t0) / values * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--values", type=int, default=100_000)
    args = parser.parse_args()
    out: dict[str, Any] = {"values": args.values, "rounds": args.rounds}
    for default, added in ADDED.items():
        serde, data = serdes(added)
        variants: dict[str, Callable[[], Any]] = {
            "copy_every_value": lambda s=serde, d=data: copy.deepcopy(s.decode(d)),
            "copy_where_shared": lambda s=serde, d=data: s.decode(d),
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        for r in range(args.rounds):
            for name, decode in variants.items():
                times[name].append(per_value_us(decode, args.values))
            shown = ", ".join(f"{n} {t[-1]:.2f} us" for n, t in times.items())
            print(f"{default} default, round {r + 1}: {shown}")
        out[default] = {name: round(statistics.median(t), 2) for name, t in times.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
