from __future__ import annotations

from mwcore.checkpoint import decode_production, encode_production
from mwcore.record import Production


def test_production_framing_round_trips() -> None:
    for p in [
        Production(b"i" * 16, "topic.a", b"key", b"\x00value\xff", 123, (("h", b"v"), ("e", b""))),
        Production(b"j" * 16, "t", None, b"", -1),
    ]:
        assert decode_production(p.id, encode_production(p)) == p
