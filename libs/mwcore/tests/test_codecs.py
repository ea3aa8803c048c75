"""State codecs round-trip exactly, and JSON state is JSON the standard library reads
(and reads back what the standard library wrote, as earlier versions stored it)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from typing import Any

import pytest

from mwcore import JsonCodec
from mwcore.errors import SerializationError


@dataclasses.dataclass
class Point:
    x: int
    y: int


VALUES = [0, 1, -7, 2**63 - 1, 2**70, True, False, None, 1.5, 1e16, 'x"y', "ünï", [1, "a", None],
          {"k": [1, 2]}, {"big": [2**64, -(2**70)]}, {"1700000000000": 3}]  # fmt: skip


@pytest.mark.parametrize("value", VALUES)
def test_json_codec_round_trips_and_writes_json(value: Any) -> None:
    codec = JsonCodec[Any]()
    encoded = codec.encode(value)
    assert json.loads(encoded) == value
    decoded = codec.decode(encoded)
    assert decoded == value and type(decoded) is type(value)
    stored_earlier = json.dumps(value, separators=(",", ":")).encode()
    assert codec.decode(stored_earlier) == value


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_json_codec_keeps_what_only_the_standard_library_writes(value: float) -> None:
    codec = JsonCodec[Any]()
    [back] = codec.decode(codec.encode([value]))
    assert back == value or (math.isnan(back) and math.isnan(value))


def test_json_codec_writes_integer_keys_as_json_does() -> None:
    assert JsonCodec[Any]().decode(JsonCodec[Any]().encode({1: 2})) == {"1": 2}


def test_json_codec_rejects_what_json_cannot_hold() -> None:
    with pytest.raises(SerializationError):
        JsonCodec[Any]().encode({1, 2})
    for not_json in (Point(1, 2), datetime.date(2026, 1, 1)):  # a dataclass is DataclassCodec's
        with pytest.raises(SerializationError):
            JsonCodec[Any]().encode({"v": not_json})
