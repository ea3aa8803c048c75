"""What the authority publishes for each computation, one record per computation on the
compacted watermark topic. Values are small JSON objects::

    {"name": "windower", "kind": "computation", "input": 1700000000000,
     "output": 1700000000000, "input_pct": ..., "output_pct": ..., "at": <wall ms>}

``input`` is the computation's input low watermark (its timers fire on it);
``output`` bounds what it may still produce. ``*_pct`` are the percentile ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from mwcore.api.clock import MIN_WATERMARK


@dataclass(frozen=True)
class Watermarks:
    name: str
    kind: str
    input: int = MIN_WATERMARK
    output: int = MIN_WATERMARK
    input_pct: int = MIN_WATERMARK
    output_pct: int = MIN_WATERMARK
    at: int = 0

    def encode(self) -> bytes:
        return json.dumps(self.__dict__, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Watermarks:
        data: dict[str, Any] = json.loads(raw)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def merged(self, other: Watermarks) -> Watermarks:
        """Field-wise maximum: what a monotonic reader keeps."""
        return replace(
            self,
            input=max(self.input, other.input),
            output=max(self.output, other.output),
            input_pct=max(self.input_pct, other.input_pct),
            output_pct=max(self.output_pct, other.output_pct),
            at=max(self.at, other.at),
        )
