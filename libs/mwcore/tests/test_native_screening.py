"""The native screening against its pure-Python reference (semantics I-13).

``Screener.screen`` makes the rest of a chunk of consumed messages into records, or
sets it aside; the reference is ``mwcore.runtime.screening.screen``, on keys,
timestamps and values drawn to cover each of its branches (messages whose headers are
drawn as in ``test_native.py``), through a native decoder and a Python one. The short
strings that recur in keys and values are kept as one ``str`` each (``strings.rs``):
equal to the reference's, one object across chunks, let go once they stop recurring.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import pytest
from test_avrogen import _schemas, _value
from test_native import _native_codecs, consumed

from mwcore.api.record import Record
from mwcore.api.signing import UNSIGNED, Signer
from mwcore.cores import core
from mwcore.limits import MAX_HEADER_BYTES, MAX_HEADERS, MAX_KEY_BYTES, MAX_TIMESTAMP, MIN_TIMESTAMP
from mwcore.runtime.envelope import read_ids
from mwcore.runtime.screening import Bindings, ReferenceScreener, screen
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.framing import SCHEMA_ID_HEADER, Framing
from testbed.native import requires_native, rust

pytestmark = requires_native


def _screening_bindings(rng: random.Random) -> tuple[Bindings, dict[str, AvroSerde]]:
    """Two input topics: one framed confluent and read by the native decoder, one framed
    single-object and read by the serde itself; and each topic's serde."""
    schema = _schemas()[0]
    registry = SchemaRegistry()
    registry.add(schema)
    confluent = AvroSerde(registry, schema["name"], framing=Framing("confluent", 7))
    single = AvroSerde(registry, schema["name"])
    decode = core("native").decoder(confluent)
    assert decode != confluent.decode  # the schema is covered
    bindings: Bindings = {"in": ("stream-a", decode), "töpic": ("stream-b", single.decode)}
    return bindings, {"in": confluent, "töpic": single}


def screened_chunk(seed: int) -> tuple[list[Any], Bindings, list[bool] | None, set[bytes]]:
    """Messages for ``screen``: keys missing, too long, not UTF-8 or fine; timestamps at
    and beyond the bounds; values that decode, or cut short; late and forged ones; values
    whose writer schema a header names (the reader's own, a GUID no registry here has,
    junk); user headers up to and beyond their bounds."""
    rng = random.Random(seed)
    bindings, serdes = _screening_bindings(rng)
    schema = _schemas()[0]
    signer = Signer("s" * 16) if seed % 2 else UNSIGNED
    out = []
    for i in range(rng.randrange(1, 40)):
        drawn = consumed(rng, signer, i)  # its headers
        topic = rng.choice(["in", "töpic"])
        serde = serdes[topic]
        good = serde.encode(_value(schema, {}, rng))
        key = rng.choice(
            [None, b"", b"k\xc3\xa9y", b"\xff\xfe", b"\xed\xa0\x80", b"x" * (MAX_KEY_BYTES + 1),
             b"x" * MAX_KEY_BYTES, str(rng.randrange(10)).encode()]
        )  # fmt: skip
        ts = rng.choice(
            [MIN_TIMESTAMP - 1, MIN_TIMESTAMP, MAX_TIMESTAMP, MAX_TIMESTAMP + 1] + [rng.randrange(2**41)] * 4
        )
        value = rng.choice([good, good, good, good[: rng.randrange(len(good))], None, b""])
        headers = [(n, v) for n, v in drawn.headers() or () if n != SCHEMA_ID_HEADER]
        if rng.random() < 0.25:  # the header variant: the writer schema named in a header
            own, single = serdes["in"].header, serdes["töpic"].header
            named = rng.choice([own, own, b"\x01" + rng.randbytes(16), single, serde.header[:3], b""])
            headers.append((SCHEMA_ID_HEADER, named))
            value = (value or b"")[len(serde.header) :]
        if rng.random() < 0.1:  # user headers at and beyond their count
            headers += [(f"h{j}", b"v") for j in range(MAX_HEADERS - 1 + rng.randrange(3))]
        if rng.random() < 0.1:  # and their bytes
            headers.append(("big", bytes(MAX_HEADER_BYTES - 10 + rng.randrange(20))))
        out.append(rust.Msg(topic, rng.randrange(8), i, key, value, (1, ts), headers))
    dup = None if rng.random() < 0.3 else [rng.random() < 0.2 for _ in out]
    already = {rng.randbytes(16) for _ in range(3)}
    return out, bindings, dup, already


def _comparable(screened: tuple[Any, ...], batch_seen: set[bytes]) -> Any:
    duplicates, early, items, keys = screened
    shown = [
        (type(it).__name__, tuple(it))
        if isinstance(it, Record)
        else (it[0], type(it[1]).__name__, str(it[1]), getattr(it[1], "reason", None))
        for it in items
    ]
    return duplicates, early, shown, keys, batch_seen


@pytest.mark.parametrize("seed", range(100))
def test_screen_screens_what_the_reference_screens(seed: int) -> None:
    messages, bindings, dup, already = screened_chunk(seed)
    signer = Signer("s" * 16) if seed % 2 else UNSIGNED
    rids, lates, forged, schema_ids, headers = read_ids(messages, signer)
    ours, theirs = set(already), set(already)
    fast = core("native").screener()
    got = fast.screen(messages, rids, dup, forged, lates, schema_ids, headers, ours, bindings)
    want = screen(messages, rids, dup, forged, lates, schema_ids, headers, theirs, bindings)
    assert _comparable(got, ours) == _comparable(want, theirs)


def test_the_screened_chunks_take_every_branch() -> None:
    seen: dict[str, int] = {"duplicate": 0, "record": 0, "error": 0}
    headed = over = 0
    for seed in range(100):
        messages, bindings, dup, already = screened_chunk(seed)
        signer = Signer("s" * 16) if seed % 2 else UNSIGNED
        rids, lates, forged, schema_ids, headers = read_ids(messages, signer)
        duplicates, early, items, _ = screen(
            messages, rids, dup, forged, lates, schema_ids, headers, set(already), bindings
        )
        seen["duplicate"] += duplicates
        for _, why in early:
            seen[why] = seen.get(why, 0) + 1
        for it in items:
            seen["record" if isinstance(it, Record) else "error"] += 1
            headed += isinstance(it, Record) and bool(it.headers)
            over += not isinstance(it, Record) and getattr(it[1], "reason", "") == "headers_too_large"
    assert len(seen) == 6 and min(seen.values()) > 10, seen
    assert headed > 10 and over > 3, (headed, over)


def test_a_value_named_by_its_header_reads_as_the_prefixed_value() -> None:
    """confluent-kafka's header variant: the value's body alone, its schema's prefix in a
    ``__value_schema_id`` header, reads on both cores as the prefixed value does; a header
    that is no such prefix makes the record a dead letter saying so."""
    bindings, serdes = _screening_bindings(random.Random(2))
    serde = serdes["in"]
    value = serde.encode(_value(_schemas()[0], {}, random.Random(5)))
    body = value[len(serde.header) :]
    messages = [
        rust.Msg("in", 0, 0, b"k", value, (1, 5), None),
        rust.Msg("in", 0, 1, b"k", body, (1, 5), [(SCHEMA_ID_HEADER, serde.header)]),
        rust.Msg("in", 0, 2, b"k", body, (1, 5), [(SCHEMA_ID_HEADER, serde.header[:3])]),
        rust.Msg("in", 0, 3, b"k", body, (1, 5), [(SCHEMA_ID_HEADER, serdes["töpic"].header)]),
    ]
    for run in (ReferenceScreener().screen, core("native").screener().screen):
        rids, lates, forged, schema_ids, headers = read_ids(messages, UNSIGNED)
        _, _, items, _ = run(messages, rids, None, forged, lates, schema_ids, headers, set(), bindings)
        prefixed, headed, short, single = items
        assert isinstance(prefixed, Record) and isinstance(headed, Record)
        assert headed.value == prefixed.value == serde.decode(value)
        for junk in (short, single):
            assert isinstance(junk, tuple) and "__value_schema_id header" in str(junk[1])
            assert "bad marker" in str(junk[1])


def test_screen_passes_on_an_error_that_is_not_a_bad_value() -> None:
    rng = random.Random(1)
    bindings, _ = _screening_bindings(rng)

    def broken(data: bytes) -> Any:
        raise ZeroDivisionError("not a serialization error")

    bindings["in"] = ("stream-a", broken)
    m = rust.Msg("in", 0, 0, b"k", b"v", (1, 5), None)
    for run in (ReferenceScreener().screen, core("native").screener().screen):
        with pytest.raises(ZeroDivisionError):
            run([m], [b"i" * 16], None, set(), {}, {}, {}, set(), bindings)


def _keyed(keys: list[bytes], value: bytes) -> list[Any]:
    return [rust.Msg("in", 0, i, k, value, (1, 5), None) for i, k in enumerate(keys)]


def _records(messages: list[Any], bindings: Bindings) -> list[Record]:
    rids = [i.to_bytes(16, "big") for i in range(len(messages))]
    screener = core("native").screener()
    _, _, items, _ = screener.screen(messages, rids, None, set(), {}, {}, {}, set(), bindings)
    assert all(isinstance(it, Record) for it in items)
    return items  # type: ignore[return-value]


def test_a_string_that_recurs_is_one_object_across_chunks_and_equal_to_the_references() -> None:
    """Keys and the strings in values: one ``str`` per distinct short value (``strings.rs``)."""
    schema = {"type": "record", "name": "S", "fields": [{"name": "q", "type": "string"},
              {"name": "m", "type": {"type": "map", "values": "string"}}]}  # fmt: skip
    serde, decode, _ = _native_codecs(schema)
    bindings: Bindings = {"in": ("s", decode)}
    value = serde.encode({"q": "héllo", "m": {"lang": "en"}})
    first = _records(_keyed([b"k\xc3\xa9y", b"other"], value), bindings)
    again = _records(_keyed([b"k\xc3\xa9y"], value), bindings)
    assert first[0].key == again[0].key == "kéy" and first[0].key is again[0].key
    assert first[0].value == again[0].value == serde.decode(value)
    assert first[0].value["q"] is again[0].value["q"] and first[1].value["q"] is again[0].value["q"]
    assert first[0].value["m"]["lang"] is again[0].value["m"]["lang"]
    long_key = b"x" * 65
    assert _records(_keyed([long_key], value), bindings)[0].key == long_key.decode()


def test_the_screener_lets_go_of_a_string_that_stops_recurring() -> None:
    """A string not seen again is dropped within two generations of new strings, so the
    table stays bounded on input of ever new keys; one still recurring stays one object."""
    decode = _native_codecs(_schemas()[0])[1]
    bindings: Bindings = {"in": ("s", decode)}
    serde = _native_codecs(_schemas()[0])[0]
    value = serde.encode(_value(_schemas()[0], {}, random.Random(3)))
    gone = _records(_keyed([b"gone-soon"], value), bindings)[0].key
    kept = _records(_keyed([b"kept"], value), bindings)[0].key
    held = sys.getrefcount(gone)
    fresh = 0
    for _ in range(2 * rust.STRINGS_GENERATION // 4096 + 1):
        keys = [f"new-{fresh + i}".encode() for i in range(4096)] + [b"kept"]
        fresh += 4096
        assert _records(_keyed(keys, value), bindings)[-1].key is kept
    assert sys.getrefcount(gone) == held - 1  # the table's reference
    assert _records(_keyed([b"gone-soon"], value), bindings)[0].key == gone


def test_a_screening_inside_a_screening_goes_on_without_the_table() -> None:
    """User code a decoder calls may screen too (or let another thread screen): the
    screener does not wait for its own table, it makes those strings afresh."""
    serde, decode, _ = _native_codecs(_schemas()[0])
    value = serde.encode(_value(_schemas()[0], {}, random.Random(4)))
    inner: Bindings = {"in": ("s", decode)}

    def screening_decode(data: bytes) -> Any:
        return {"inner": _records(_keyed([b"inner"], value), inner)[0].key, "data": data}

    outer = _records(_keyed([b"outer"], b"raw"), {"in": ("s", screening_decode)})
    assert outer[0].key == "outer" and outer[0].value == {"inner": "inner", "data": b"raw"}
