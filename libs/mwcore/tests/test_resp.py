"""The hand-packed RESP command equals the plain packing of the same arguments."""

from __future__ import annotations

from mwcore.store.redis_store import _packed_seen
from mwcore.store.resp import pack_command


def test_a_prepacked_section_packs_like_its_arguments() -> None:
    seen = {b"a" * 16: 5, b"b" * 16: -3, b"c" * 16: 10**12}
    flat: list[bytes | str | int] = ["EVALSHA", 1]
    for rid, ts in seen.items():
        flat += [ts, rid]
    flat.append(b"end")
    packed = pack_command(["EVALSHA", 1, _packed_seen(seen), b"end"])
    assert packed == pack_command(flat)
    assert packed.startswith(b"*9\r\n$7\r\nEVALSHA\r\n$1\r\n1\r\n$1\r\n5\r\n$16\r\naaaa")
