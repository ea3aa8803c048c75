from __future__ import annotations

from mwcore.api.record import Production
from mwcore.store.checkpoint_wire import decode_production, encode_production


def test_production_framing_round_trips() -> None:
    for p in [
        Production(b"i" * 16, "topic.a", b"key", b"\x00value\xff", 123, (("h", b"v"), ("e", b""))),
        Production(b"j" * 16, "t", None, b"", -1),
    ]:
        assert decode_production(p.id, encode_production(p)) == p


def test_batch_framing_round_trips_and_matches_the_per_production_framing() -> None:
    from mwcore.store.checkpoint_wire import _LEN, decode_batch, encode_batch

    batch = [
        Production(b"a" * 16, "out.counts", b"k1", b"v1", 5),
        Production(b"b" * 16, "out.counts", b"", b"", 0),  # the inline path
        Production(b"c" * 16, "dlq", b"k", b"raw", 7, (("mw-error", b"boom"),)),  # the generic path
        Production(b"d" * 16, "out.other", None, b"x" * 300, 2**40),
    ]
    blob = encode_batch(batch)
    assert decode_batch(blob) == batch
    generic = b"".join(_LEN.pack(len(body)) + p.id + body for p in batch for body in [encode_production(p)])
    assert blob == generic
    # The stored framing itself, pinned (checkpoints written by older versions must still read).
    framed = b"\x00\x0aout.counts" + b"\x00\x00\x00\x02k1" + (5).to_bytes(8, "big") + b"\x00\x00" + b"v1"
    assert encode_production(batch[0]) == framed
    assert blob.startswith(_LEN.pack(len(framed)) + b"a" * 16 + framed)
