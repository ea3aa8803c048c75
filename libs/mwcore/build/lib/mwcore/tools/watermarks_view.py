"""``mw watermarks``: each computation's input and output watermark and its lag behind
wall time, live (or once, as JSON, with ``--once``)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TextIO

from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.api.signing import UNSIGNED, Signer
from mwcore.transport.watermark_topic import WatermarkFeed
from mwcore.watermarks.published import Watermarks


def _fmt_ts(ts: int) -> str:
    if ts <= MIN_WATERMARK:
        return "held"
    if ts >= MAX_WATERMARK:
        return "end"
    try:
        return datetime.fromtimestamp(ts / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return str(ts)


def _lag_ms(ts: int, now_ms: int) -> int | None:
    if ts <= MIN_WATERMARK or ts >= MAX_WATERMARK:
        return None
    return now_ms - ts


def rows(latest: Iterable[Watermarks], now_ms: int) -> list[dict[str, Any]]:
    out = []
    for wm in sorted(latest, key=lambda w: (w.kind != "injector", w.name)):
        out.append(
            {
                "name": wm.name,
                "kind": wm.kind,
                "input": wm.input,
                "output": wm.output,
                "input_pct": wm.input_pct,
                "lag_ms": _lag_ms(wm.input, now_ms),
                "pct_lag_ms": _lag_ms(wm.input_pct, now_ms),
                "published_ms_ago": now_ms - wm.at if wm.at else None,
            }
        )
    return out


def _line(name: str, kind: str, inp: str, lag: str, plag: str, out: str) -> str:
    return f"{name:<28} {kind:<11} {inp:<23} {lag:>9} {plag:>9} {out:<23}"


def render(table: list[dict[str, Any]]) -> str:
    cols = ("computation", "kind", "input watermark", "lag", "p99 lag", "output watermark")
    head = _line(*cols)
    lines = [head, "-" * len(head)]
    for r in table:
        lag = "" if r["lag_ms"] is None else f"{r['lag_ms'] / 1000:.2f}s"
        plag = "" if r["pct_lag_ms"] is None else f"{r['pct_lag_ms'] / 1000:.2f}s"
        lines.append(_line(r["name"], r["kind"], _fmt_ts(r["input"]), lag, plag, _fmt_ts(r["output"])))
    if not table:
        lines.append("(nothing published yet: is the watermark authority running?)")
    return "\n".join(lines)


def main(
    bootstrap: str,
    namespace: str,
    once: bool,
    interval_s: float,
    out: TextIO = sys.stdout,
    signer: Signer = UNSIGNED,
) -> int:
    feed = WatermarkFeed(bootstrap, namespace, signer)
    try:
        feed.read_to_end()
        if once:
            print(json.dumps(rows(feed.latest.values(), time.time_ns() // 1_000_000)), file=out)
            return 0
        while True:
            feed.poll(interval_s)
            table = rows(feed.latest.values(), time.time_ns() // 1_000_000)
            out.write("\x1b[2J\x1b[H" + f"watermarks of namespace {namespace!r}\n\n" + render(table) + "\n")
            out.flush()
    except KeyboardInterrupt:
        return 0
    finally:
        feed.close()
