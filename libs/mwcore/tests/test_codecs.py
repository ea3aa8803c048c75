"""State codecs round-trip and match JSON exactly (the int fast path included)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mwcore import JsonCodec
from mwcore.errors import SerializationError


@pytest.mark.parametrize("value", [0, 1, -7, 2**70, True, False, 1.5, 'x"y', [1, "a"], {"k": [1, 2]}])
def test_json_codec_round_trips_and_matches_json(value: Any) -> None:
    codec = JsonCodec[Any]()
    encoded = codec.encode(value)
    assert encoded == json.dumps(value, separators=(",", ":")).encode()
    decoded = codec.decode(encoded)
    assert decoded == value and type(decoded) is type(value)


def test_json_codec_rejects_what_json_cannot_hold() -> None:
    with pytest.raises(SerializationError):
        JsonCodec[Any]().encode({1, 2})
