"""What the authority publishes for each computation, one record per computation on the
compacted watermark topic. Values are small JSON objects::

    {"name": "windower", "kind": "computation", "input": 1700000000000,
     "output": 1700000000000, "input_pct": ..., "output_pct": ..., "at": <wall ms>}

``input`` is the computation's input low watermark (its timers fire on it);
``output`` bounds what it may still produce. ``*_pct`` are the percentile ones.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.errors import RejectedRecord

MAX_RECORD_BYTES = 4096  # the authority's records are a few hundred bytes
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,254}$")  # computations, rekey stages, injectors


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
        """What the authority wrote (no checks: ``parse`` reads what anyone may have)."""
        data: dict[str, Any] = json.loads(raw)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    @classmethod
    def parse(cls, key: bytes | None, raw: bytes) -> Watermarks:
        """A record read from the watermark topic, which anyone who can write it may
        have written: ``RejectedRecord`` unless it is a small JSON object whose name is
        its key, whose kind is known, whose watermarks are integers of the watermark's
        range, and whose fields agree as the authority writes them (a computation's
        output at most its input, a percentile at least its exact value)."""
        if len(raw) > MAX_RECORD_BYTES:
            raise RejectedRecord("too_large", f"{len(raw)} bytes")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise RejectedRecord("not_json") from None
        if not isinstance(data, dict):
            raise RejectedRecord("not_an_object")
        name, kind = data.get("name"), data.get("kind")
        if not isinstance(name, str) or not _NAME.match(name):
            raise RejectedRecord("bad_name", repr(name)[:80])
        if key is None or key != name.encode():
            raise RejectedRecord("key_mismatch", f"key {key!r:.80} carries {name!r}")
        if kind not in ("computation", "injector"):
            raise RejectedRecord("bad_kind", repr(kind)[:40])
        values: dict[str, int] = {}
        for fld in ("input", "output", "input_pct", "output_pct", "at"):
            v = data.get(fld, 0 if fld == "at" else MIN_WATERMARK)
            if type(v) is not int or not MIN_WATERMARK <= v <= MAX_WATERMARK:
                raise RejectedRecord("out_of_range", f"{fld} {v!r:.40}")
            values[fld] = v
        wm = cls(name, kind, **values)
        consistent = wm.input_pct >= wm.input and wm.output_pct >= wm.output
        consistent &= wm.output <= wm.input if kind == "computation" else wm.output == wm.input
        if not consistent or wm.at < 0:
            raise RejectedRecord("inconsistent", str(values))
        return wm

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
