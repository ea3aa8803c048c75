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


def parse_line(line: str) -> dict[str, Any]:
    """A record of the log, or ValueError saying what is wrong with the line."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except RecursionError:
        raise ValueError("not JSON: nested too deep") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for name, kind in (("ts", int), ("query", str), ("lang", str), ("user", int)):
        if not isinstance(data.get(name), kind) or isinstance(data.get(name), bool):
            raise ValueError(f"field {name!r} missing or not {kind.__name__}")
    if not data["query"]:
        raise ValueError("empty query")
    if not 0 <= data["user"] <= LONG_MAX:
        raise ValueError(f"field 'user' out of range: {data['user']}")
    if not 0 <= data["ts"] <= LONG_MAX:
        raise ValueError(f"field 'ts' out of range: {data['ts']}")
    return data
