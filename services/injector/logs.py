"""The query-log format: one JSON object per line, one file per second of event time.

``queries-<nominal second in ms, 15 digits>.jsonl`` holds records whose timestamps
are in ``[second - jitter_ms, second + 1000)``; files are written whole (to a
temporary name, then renamed), so a reader never sees half a file. ``scenario.json``
beside them records the jitter bound; ``truth.jsonl`` the scripted anomalies.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson

PREFIX = "queries-"
SUFFIX = ".jsonl"


def file_name(second_ms: int) -> str:
    return f"{PREFIX}{second_ms:015d}{SUFFIX}"


def nominal_second(path: Path) -> int | None:
    """The file's nominal second (ms), or None if it is not a log file."""
    name = path.name
    if not (name.startswith(PREFIX) and name.endswith(SUFFIX)):
        return None
    digits = name[len(PREFIX) : -len(SUFFIX)]
    return int(digits) if digits.isdigit() else None


def write_atomically(path: Path, lines: list[str]) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, path)


def record_line(ts: int, query: str, lang: str, user: int) -> str:
    return json.dumps({"ts": ts, "query": query, "lang": lang, "user": user}, separators=(",", ":"))


MAX_LINE_BYTES = 65_536  # a query-log line (a record is a few dozen bytes)
LONG_MAX = 2**63 - 1  # an Avro long


_FIELDS = (("ts", int), ("query", str), ("lang", str), ("user", int))


def parse_line(line: str | bytes) -> dict[str, Any]:
    """A record of the log, or ValueError saying what is wrong with the line (orjson:
    strict RFC 8259, so no NaN, and nesting past 1,024 levels is refused)."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if type(data) is not dict:
        raise ValueError("not a JSON object")
    for name, kind in _FIELDS:
        if type(data.get(name)) is not kind:  # (exactly: a bool is not an int here)
            raise ValueError(f"field {name!r} missing or not {kind.__name__}")
    if not data["query"]:
        raise ValueError("empty query")
    if not 0 <= data["user"] <= LONG_MAX:
        raise ValueError(f"field 'user' out of range: {data['user']}")
    if not 0 <= data["ts"] <= LONG_MAX:
        raise ValueError(f"field 'ts' out of range: {data['ts']}")
    return data
