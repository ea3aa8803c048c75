"""What ``mw up`` watches and shows: records of the pipeline's streams (counted, and
decoded for the application where it asks), each computation's watermark lag, and
the live view (or, without a terminal, a progress line)."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from typing import Any, TextIO

from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.api.record import ID_HEADER
from mwcore.errors import SerializationError
from mwcore.serde.avro import SchemaRegistry, decode_any
from mwcore.transport.reader import PartitionReader
from mwcore.transport.topics import partition_counts, topic_name
from mwcore.watermarks.published import Watermarks

OnRecord = Callable[[str, Any, bytes], None]


class StreamFollower:
    """Counts the records of ``streams`` from their beginning; hands each record of the
    ``decoded`` ones to ``on_record`` once (decoded with the writer schema it names; a
    record re-sent after a crash has the same id and is skipped)."""

    def __init__(
        self,
        bootstrap: str,
        streams: Collection[str],
        decoded: Collection[str],
        registry: SchemaRegistry,
        on_record: OnRecord,
    ) -> None:
        self._stream = {topic_name("default", s): s for s in {*streams, *decoded}}
        parts = partition_counts(bootstrap, list(self._stream))
        self._reader = PartitionReader(bootstrap, {(t, p): 0 for t, n in parts.items() for p in range(n)})
        self._decoded = set(decoded)
        self._registry = registry
        self._on_record = on_record
        self._seen: set[bytes] = set()
        self.counts: dict[str, int] = dict.fromkeys(streams, 0)
        self.undecodable = 0

    def poll(self) -> None:
        """Take everything that has arrived."""
        while True:
            msgs = self._reader.poll(10_000, 0)
            if not msgs:
                return
            for m in msgs:
                stream = self._stream.get(m.topic() or "", "")
                if stream in self.counts:
                    self.counts[stream] += 1
                if stream in self._decoded:
                    self._deliver(stream, m.value() or b"", dict(m.headers() or []).get(ID_HEADER))

    def _deliver(self, stream: str, value: bytes, rid: Any) -> None:
        rid = rid if isinstance(rid, bytes) else b""
        if rid and rid in self._seen:
            return
        try:
            decoded = decode_any(self._registry, value)[1]
        except SerializationError:
            self.undecodable += 1  # a writer schema the directory lacks: not the application's to see
            return
        if rid:
            self._seen.add(rid)
        self._on_record(stream, decoded, rid)

    def close(self) -> None:
        self._reader.close()


def lag_s(watermark: int, now_ms: int) -> float | None:
    """Seconds the watermark is behind the clock; None while it is held (not yet
    known, or past the end)."""
    return None if watermark <= MIN_WATERMARK or watermark >= MAX_WATERMARK else (now_ms - watermark) / 1000


class LagSamples:
    """Each computation's input watermark lag, sampled once a second, for the summary."""

    def __init__(self) -> None:
        self._lags: dict[str, list[float]] = defaultdict(list)

    def sample(self, latest: Mapping[str, Watermarks], now_ms: int) -> None:
        for name, wm in latest.items():
            lag = lag_s(wm.input, now_ms)
            if lag is not None:
                self._lags[name].append(lag)

    def summary_ms(self) -> dict[str, dict[str, int]]:
        return {
            n: {"median": round(statistics.median(v) * 1000), "max": round(max(v) * 1000)}
            for n, v in sorted(self._lags.items())
        }


def counts_line(counts: Mapping[str, int]) -> str:
    return "    ".join(f"{stream} {n:,}" for stream, n in counts.items())


def render(
    out: TextIO,
    title: str,
    elapsed: float,
    counts: Mapping[str, int],
    latest: Mapping[str, Watermarks],
    extra: list[str],
    exit_codes: Mapping[str, int | None],
) -> None:
    """The live view, redrawn in place: records per stream, watermark lags, the
    application's own lines, the services."""
    now_ms = time.time_ns() // 1_000_000
    lines = [
        f"mw up: {title} on the local stack, {elapsed:.0f} s (Ctrl-C or `mw down` stops it)",
        "",
        "records  " + counts_line(counts),
        "",
        f"{'computation':<22}{'watermark lag':>15}{'p99 lag':>10}",
    ]
    if not latest:
        lines.append("(none published)")
    for name, wm in sorted(latest.items(), key=lambda kv: (kv[1].kind != "injector", kv[0])):
        lag, plag = lag_s(wm.input, now_ms), lag_s(wm.input_pct, now_ms)
        lines.append(
            f"{name:<22}{'held' if lag is None else f'{lag:.2f} s':>15}"
            f"{'' if plag is None else f'{plag:.2f} s':>10}"
        )
    if extra:
        lines += ["", *extra]
    lines += ["", "services: " + "  ".join(f"{n} {_state(rc)}" for n, rc in exit_codes.items())]
    out.write("\x1b[2J\x1b[H" + "\n".join(lines) + "\n")
    out.flush()


def _state(exit_code: int | None) -> str:
    """A one-shot service (a batch job) that has finished is done, not down."""
    return "up" if exit_code is None else "done" if exit_code == 0 else f"DOWN (exit {exit_code})"


def progress(out: TextIO, elapsed: float, counts: Mapping[str, int]) -> None:
    """The line written every 10 s when stderr is not a terminal."""
    print(f"{elapsed:5.0f}s records {counts_line(counts)}", file=out, flush=True)
