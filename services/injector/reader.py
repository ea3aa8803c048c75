"""Reads the query logs of a directory into the ``queries`` stream.

Files are taken in time order as they appear (this process takes those whose name
hashes to its index, of ``processes``). Before a file is read, the injector promises
its nominal second minus the jitter bound as its low watermark and reports it, so a
record older than that is deterministically *late* (sent with ``mw-late-ms``). A file
is finished once Kafka has acknowledged all of it; finished files are recorded with
the injector (``Injector.finish``), so a restart resumes with the first unfinished
one. Record ids derive from the file name and line number: a file read again after a
crash is dropped downstream. A malformed line goes to ``injector.dead-letters`` with
the reason; the file goes on.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from mwcore import Injector, derive_id
from services.injector.logs import nominal_second, parse_line

log = structlog.get_logger("services.injector")


@dataclass(frozen=True)
class ReaderConfig:
    directory: Path
    # the jitter bound, asked for each file: a generator may write its scenario (and
    # so the bound) after the injector started
    jitter_ms: Callable[[], int]
    stream: str = "queries"
    idle_s: float = 0.1  # nothing new: look again after this long


class LogReader:
    def __init__(self, injector: Injector, config: ReaderConfig) -> None:
        self.inj = injector
        self.cfg = config
        self.idle_s = config.idle_s
        self.files = 0
        self.records = 0

    def _mine(self, name: str) -> bool:
        return zlib.crc32(name.encode()) % self.inj.processes == self.inj.index

    def pending(self) -> list[tuple[int, Path]]:
        if not self.cfg.directory.is_dir():
            return []
        done = self.inj.finished()
        out = []
        for path in self.cfg.directory.iterdir():
            second = nominal_second(path)
            if second is not None and path.name not in done and self._mine(path.name):
                out.append((second, path))
        return sorted(out)

    def step(self) -> int:
        """Inject every file that is there now; returns how many."""
        files = self.pending()
        for second, path in files:
            self._inject(second, path)
        self.inj.poll()
        return len(files)

    def _inject(self, second: int, path: Path) -> None:
        inj = self.inj
        jitter = self.cfg.jitter_ms()
        inj.advance(second - jitter)
        inj.report()  # the promise is made before the file's records go out
        file_id = hashlib.blake2b(path.name.encode(), digest_size=16).digest()
        n = 0
        for n, line in enumerate(path.read_text().splitlines()):
            rid = derive_id(file_id, n)
            try:
                rec = parse_line(line)
            except ValueError as exc:
                inj.dead_letter(line.encode(), str(exc), rid, file=path.name, line=str(n + 1))
                continue
            value = {
                "query": rec["query"],
                "lang": rec["lang"],
                "user": rec["user"],
                "source_file": path.name,
            }
            inj.send(self.cfg.stream, rec["query"], value, rec["ts"], rid)
        inj.flush()
        self.inj.finish(path.name)
        inj.advance(second + 1000 - jitter)
        self.files += 1
        self.records += n + 1
        log.debug("file_injected", file=path.name, lines=n + 1)
