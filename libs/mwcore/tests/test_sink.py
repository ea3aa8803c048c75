"""The Spark sink's keys and record ids (``df.write.format("mw")``).

A retried or re-run write must give every row the id it had before, in another
process and after an upgrade, or its repeats would not be dropped: the ids are pinned
here to values computed once. (``tests/test_archive.py`` retries a real write.)
"""

from __future__ import annotations

import pytest

from mwcore.api.ids import ID_BYTES
from mwcore.archive.spark.sink import _key_bytes, _record_id, content_id


def test_keys_keep_their_bytes_and_a_null_key_stays_null() -> None:
    assert _key_bytes(b"q1") == b"q1"
    assert _key_bytes(bytearray(b"q1")) == b"q1"
    assert _key_bytes("q1") == b"q1"
    assert _key_bytes(None) is None


@pytest.mark.parametrize(
    ("value", "pinned"),
    [
        ("model-7", "74575c8b4dc6399400fb216e7824eb38"),
        (3, "1ac87a20c1282dfb207ff3ff01565c75"),
        (b"short", "af2d17085c3d0df7214dc311e675377c"),
    ],
)
def test_an_id_column_value_always_gives_the_same_id(value: object, pinned: str) -> None:
    got = _record_id(value)
    assert got is not None and len(got) == ID_BYTES
    assert got.hex() == pinned


def test_sixteen_bytes_are_the_id_and_anything_else_is_hashed() -> None:
    rid = bytes(range(ID_BYTES))
    assert _record_id(rid) == rid and _record_id(bytearray(rid)) == rid
    assert _record_id(None) is None
    text = "0123456789abcdef"  # sixteen characters, but text: hashed
    assert len(text) == ID_BYTES and _record_id(text) not in (None, text.encode())
    ids = [_record_id(v) for v in (3, 4, 0, "3", rid[:-1], rid + b"\x00")]
    assert len(set(ids)) == len(ids)  # a number and its text, or a byte more or less, differ


def test_a_row_without_an_id_gets_one_from_everything_that_makes_it() -> None:
    rid = content_id("s", b"k", 1, b"v")
    assert rid.hex() == "c256049b7ea3f9461efad0f9d652237e"
    others = [
        content_id("t", b"k", 1, b"v"),  # another stream
        content_id("s", b"K", 1, b"v"),  # another key
        content_id("s", b"k", 2, b"v"),  # another timestamp
        content_id("s", b"k", 1, b"w"),  # another value
        content_id("s", b"", 1, b"v"),  # no key
    ]
    assert len({rid, *others}) == 1 + len(others)
