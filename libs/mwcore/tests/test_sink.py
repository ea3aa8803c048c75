"""The Spark sink's keys and record ids (``df.write.format("mw")``)."""

from __future__ import annotations

from mwcore.ids import ID_BYTES
from mwcore.spark.sink import _key_bytes, _record_id, content_id


def test_keys_keep_their_bytes_and_a_null_key_stays_null() -> None:
    assert _key_bytes(b"q1") == b"q1"
    assert _key_bytes(bytearray(b"q1")) == b"q1"
    assert _key_bytes("q1") == b"q1"
    assert _key_bytes(None) is None


def test_ids_are_sixteen_bytes_and_equal_values_keep_equal_ids() -> None:
    rid = bytes(range(ID_BYTES))
    assert _record_id(rid) == rid and _record_id(bytearray(rid)) == rid
    assert _record_id(None) is None
    for value in (3, "model-7", b"short"):
        got = _record_id(value)
        assert got is not None and len(got) == ID_BYTES and got == _record_id(value)
    assert _record_id(3) != _record_id(4) != _record_id(0)
    assert content_id("s", b"k", 1, b"v") == content_id("s", b"k", 1, b"v") != content_id("s", b"k", 2, b"v")
