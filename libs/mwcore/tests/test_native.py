"""The native core against its pure-Python reference (semantics I-13): the same input,
byte for byte the same output.

``pack_commit`` packs a checkpoint into the commit script's ``EVALSHA`` call; the
reference is ``commit_args`` packed by hiredis (``fast_script.pack_call``). Checkpoints
are drawn at random (seeded): empty and full sections, deletions, keys without a
value, unicode topics and headers, extreme timestamps, pending batches of several
productions. The store contract (``test_store_contract.py``) runs the native packing
against a real Redis as well.

``read_ids`` reads a chunk of consumed messages' record ids, late marks and unverified
ids; the reference is ``mwcore.runtime.envelope.read_ids``, on messages whose headers
are drawn to cover each of its branches, with and without a pipeline secret.
``Screener.screen``, the rest of such a chunk, is held to its reference in
``test_native_screening.py``.

Skipped only where the native module is not built (``testbed/native.py``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from test_avrogen import _schemas, _value

from mwcore.api.record import Production
from mwcore.api.signing import UNSIGNED, Signer
from mwcore.cores import core
from mwcore.runtime.bloom import BloomFilter
from mwcore.runtime.envelope import read_ids
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.store.checkpoint import Checkpoint
from mwcore.store.checkpoint_wire import commit_args
from mwcore.store.fast_script import Packed, pack_call
from testbed.native import requires_native, rust

pytestmark = requires_native

SHA = "9" * 40
KEYS = ["mw:{ns/c/0}:state", "mw:{ns/c/0}:timers", "mw:{ns/c/0}:pending"]


def pack_native(keys: list[str], token: str, fencing: bool, cp: Checkpoint) -> bytes:
    """The native core's packer (through the seam), its call's bytes."""
    packed = core("native").packer()(SHA, keys, token, fencing, cp)
    assert isinstance(packed, Packed)
    return packed.command


def random_bytes(rng: random.Random, most: int) -> bytes:
    return rng.randbytes(rng.choice([0, 1, rng.randrange(most + 1)]))


def production(rng: random.Random) -> Production:
    headers = tuple(
        (rng.choice(["mw-id", "mw-source-topic", "ünïcode", ""]), random_bytes(rng, 40))
        for _ in range(rng.randrange(4))
    )
    return Production(
        id=rng.randbytes(16),
        topic=rng.choice(["out", "ns.dead-letters", "töpic"]),
        key=None if rng.random() < 0.2 else random_bytes(rng, 30),
        value=random_bytes(rng, 2000),
        timestamp=rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(2**41)]),
        headers=headers,
    )


def writes(rng: random.Random, most: int) -> dict[bytes, bytes | None]:
    return {
        rng.randbytes(rng.randrange(1, 24)): None if rng.random() < 0.3 else random_bytes(rng, 200)
        for _ in range(rng.randrange(most))
    }


def batch(rng: random.Random) -> list[Production]:
    return [production(rng) for _ in range(rng.randrange(1, 6))]


def checkpoint(rng: random.Random) -> Checkpoint:
    return Checkpoint(
        state=writes(rng, 50),
        timers=writes(rng, 10),
        pending={
            rng.randbytes(16): [production(rng) for _ in range(rng.randrange(1, 6))]
            for _ in range(rng.randrange(3))
        },
        acked=[rng.randbytes(16) for _ in range(rng.randrange(3))],
        seen={
            rng.randbytes(16): rng.choice([0, -3, 2**62, rng.randrange(2**41)])
            for _ in range(rng.randrange(40))
        },
        positions={f"in.töpic:{p}": rng.randrange(2**40) for p in range(rng.randrange(4))},
        commit_id=rng.randbytes(16),
        seen_gc_below=None if rng.random() < 0.5 else rng.randrange(-(2**40), 2**41),
        segments=writes(rng, 3),
    )


@pytest.mark.parametrize("seed", range(200))
def test_pack_commit_is_byte_for_byte_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    cp = checkpoint(rng)
    token, fencing = f"{rng.randrange(2**32):x}:{seed}:t", rng.random() < 0.8
    expected = pack_call(SHA, KEYS, commit_args(token, fencing, cp))
    assert pack_native(KEYS, token, fencing, cp) == expected


def test_an_empty_checkpoint_too() -> None:
    cp = Checkpoint(commit_id=b"c" * 16)
    assert pack_native([], "t", True, cp) == pack_call(SHA, [], commit_args("t", True, cp))


def test_what_the_reference_refuses_the_native_core_refuses() -> None:
    """A state value that is not bytes (a codec's str) is an error in both, not a
    silently different command."""
    cp = Checkpoint(state={b"k": "text"}, commit_id=b"c" * 16)  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        pack_native(KEYS, "t", True, cp)


@pytest.mark.parametrize("seed", range(20))
def test_the_bloom_filter_sets_the_references_bits_and_finds_the_same_duplicates(seed: int) -> None:
    """Ids added in chunks (some with little entropy, as users' ids can be), then the
    same chunks asked: identical words, answers and duplicate passes."""
    rng = random.Random(seed)
    capacity = rng.choice([1, 5_000, 60_000])
    ours, theirs = BloomFilter(capacity=capacity), rust.Bloom(capacity)
    assert ours.nbytes == theirs.nbytes
    added: list[bytes] = []
    for _ in range(8):
        chunk = [
            rng.randbytes(16) if rng.random() < 0.7 else rng.randrange(1000).to_bytes(16, "big")
            for _ in range(rng.randrange(1, 3_000))
        ]
        asked = chunk + rng.sample(added, min(len(added), 200)) + [rng.choice(chunk)] * 3
        rng.shuffle(asked)
        in_batch = set(rng.sample(asked, len(asked) // 10))
        assert theirs.contains_many(asked) == ours.contains_many(asked)
        assert theirs.duplicates(asked, in_batch) == ours.duplicates(asked, in_batch)
        ours.add_many(chunk)
        theirs.add_many(chunk)
        added += chunk
        assert theirs.words() == ours.words()
        assert (theirs.count, theirs.full) == (ours.count, ours.full)


def test_the_bloom_filter_refuses_what_is_not_a_record_id() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        rust.Bloom().add_many([b"short"])
    with pytest.raises(TypeError):
        rust.Bloom().contains_many(["a str"])  # type: ignore[list-item]


def _native_codecs(schema: Any) -> tuple[AvroSerde, Callable[[bytes], Any], Callable[[Any], bytes]]:
    registry = SchemaRegistry()
    registry.add(schema)
    serde = AvroSerde(registry, schema["name"])
    native = core("native")
    decode, encode = native.decoder(serde), native.encoder(serde)
    assert decode != serde.decode and encode != serde.encode  # the schema is covered
    return serde, decode, encode


def deferred(codec: Callable[..., Any]) -> int:
    """How many values the native codec (a bound ``decode`` or ``encode``) handed to the
    reference so far."""
    count: int = codec.__self__.deferred  # type: ignore[attr-defined]
    return count


def _outcome(decode: Callable[[bytes], Any], data: bytes) -> tuple[str, Any]:
    try:
        return "value", decode(data)
    except Exception as exc:  # the reference's error, type and text
        return "error", f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("schema", _schemas(), ids=lambda s: s["name"])
def test_the_decoder_reads_what_the_reference_reads(schema: Any) -> None:
    """Values of every schema of the repository (and one with every type), then the
    same bytes cut short, with bytes flipped, or written under another fingerprint:
    the same value, or the same error, from both. Every value of the schema's own writer
    is read natively (none deferred to the reference: a decoder that deferred everything
    would pass the comparisons alone); broken bytes are, where Rust cannot read them."""
    serde, decode, _ = _native_codecs(schema)
    rng = random.Random(13)
    deferred_good = 0
    for _ in range(300):
        data = serde.encode(_value(schema, {}, rng))
        before = deferred(decode)
        assert decode(data) == serde.decode(data)
        deferred_good += deferred(decode) - before
        broken = [data[: rng.randrange(len(data))], data[:2] + rng.randbytes(8) + data[10:]]
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(10, len(data))] = rng.randrange(256) if len(data) > 10 else 0
        broken.append(bytes(flipped))
        broken.append(data[:10] + bytes([0xFF] * 9 + [rng.choice([1, 2, 0x7F, 0x80])]) + data[10:])
        for bad in broken:
            assert _outcome(decode, bad) == _outcome(serde.decode, bad), bad
    assert deferred_good == 0, f"{deferred_good} of 300 values of the schema's own writer deferred"
    assert deferred(decode) > 0  # (the broken ones: the reference's errors)


def _mutants(value: Any, schema: Any, rng: random.Random) -> list[Any]:
    """``value`` with one part swapped for something of another (or a sub-) type, or
    taken out: what the reference writes anyway (a bool for an int, a tuple for a
    list, an int for a float) or refuses."""
    if not isinstance(value, dict):
        return []
    out = []
    odd = [True, 1, 1.5, 2**40, 2**70, -(2**63) - 1, 3.5e38, float("nan"), "x", "\ud800", b"x",
           bytearray(b"ab"), None, (1, 2), [1], {"k": 1}, {1: "v"}, "RED", "PURPLE"]  # fmt: skip
    for name in list(value):
        for swap in rng.sample(odd, 6):
            out.append({**value, name: swap})
        out.append({k: v for k, v in value.items() if k != name})
    return out


@pytest.mark.parametrize("schema", _schemas(), ids=lambda s: s["name"])
def test_the_encoder_writes_what_the_reference_writes(schema: Any) -> None:
    """Values of every schema of the repository (and one with every type), then the
    same with a part of the wrong type or missing: the same bytes, or the same error,
    from both. Every value whose parts have exactly the types the schema reads back is
    written natively (none deferred); the mutants are, where Rust does not write them."""
    serde, _, encode = _native_codecs(schema)
    rng = random.Random(17)
    deferred_good = 0
    for _ in range(300):
        value = _value(schema, {}, rng)
        before = deferred(encode)
        assert encode(value) == serde.encode(value)
        deferred_good += deferred(encode) - before
        for bad in _mutants(value, schema, rng):
            assert _outcome(encode, bad) == _outcome(serde.encode, bad), bad
    assert deferred_good == 0, f"{deferred_good} of 300 values of exact types deferred"


def consumed(rng: random.Random, signer: Signer, i: int) -> Any:
    """A message as the native consumer hands it over, its headers drawn to cover every
    branch of the reference: no id, an id of the wrong length or without a value, a
    signed id (MAC version 1 or 2, for this record or copied from another), a forged or
    missing MAC, late marks with and without a value, schema id headers (an id's, a
    GUID's, junk, none), the kit's other headers in any case, user headers (with and
    without a value), repeats."""
    rid = rng.randbytes(16)
    topic = rng.choice(["in", "töpic", ""])
    key = rng.choice([None, b"", b"k", rng.randbytes(5)])
    value = rng.choice([b"", b"\x00\x00\x00\x00\x01", b"\xc3\x01" + bytes(8)]) + random_bytes(rng, 20)
    v2 = signer.sign_record(rid, topic, key, value) if signer.enabled else rng.randbytes(17)
    copied = signer.sign_record(rid, topic, key, value + b"x") if signer.enabled else rng.randbytes(17)
    pool: list[tuple[str, bytes | None]] = [
        ("mw-id", rid),
        ("mw-id", rng.randbytes(rng.choice([0, 15, 17]))),
        ("mw-id", None),
        ("mw-mac", rng.choice([v2, signer.sign_id(rid) if signer.enabled else rng.randbytes(16)])),
        ("mw-mac", rng.choice([rng.randbytes(rng.choice([15, 16])), b"\x02" + rng.randbytes(16), copied])),
        ("mw-mac", None),
        ("mw-late-ms", str(rng.randrange(10**6)).encode()),
        ("mw-late-ms", None),
        ("__value_schema_id", rng.choice([b"\x00" + rng.randbytes(4), b"\x01" + rng.randbytes(16)])),
        ("__value_schema_id", rng.choice([None, b"", rng.randbytes(rng.choice([3, 5, 17]))])),
        ("mw-other", rng.randbytes(4)),
        ("MW-Other", b"x"),
        ("ünïcode", b""),
        ("trace-id", rng.randbytes(8)),
        ("tenant", None),
    ]
    headers = [rng.choice(pool) for _ in range(rng.randrange(6))]
    if rng.random() < 0.5:  # the common case: an id and its MAC
        headers = [("mw-id", rid), ("mw-mac", pool[3][1]), *headers[:1]]
    return rust.Msg(
        topic,
        rng.randrange(64),
        rng.choice([0, i, 2**40 + i]),
        key,
        value,
        (1, rng.randrange(2**41)),
        headers if headers or rng.random() < 0.5 else None,
    )


def chunk(seed: int) -> tuple[list[Any], Signer]:
    rng = random.Random(seed)
    signer = Signer("s" * 16 + str(seed), "read" if seed % 4 == 1 else "off") if seed % 2 else UNSIGNED
    return [consumed(rng, signer, i) for i in range(rng.randrange(1, 40))], signer


@pytest.mark.parametrize("seed", range(100))
def test_read_ids_reads_what_the_reference_reads(seed: int) -> None:
    messages, signer = chunk(seed)
    assert rust.read_ids(messages, signer.mac_key, signer.accepts_v1) == read_ids(messages, signer)


def test_the_drawn_chunks_take_every_branch() -> None:
    claimed = derived = late = forged = 0
    for seed in range(100):
        messages, signer = chunk(seed)
        rids, lates, bad, _, _ = read_ids(messages, signer)
        for m, rid in zip(messages, rids, strict=True):
            ids_given = [v for n, v in m.headers() or () if n == "mw-id"]
            claimed += bool(ids_given) and rid == ids_given[-1]
            derived += rid not in ids_given
        late += len(lates)
        forged += len(bad)
    assert min(claimed, derived, late, forged) > 20, (claimed, derived, late, forged)


def test_read_ids_refuses_what_is_not_a_consumed_message() -> None:
    with pytest.raises(TypeError):
        rust.read_ids([object()], None)
