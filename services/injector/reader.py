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

Anyone who can write the directory may put anything in it: only regular files are
read (a symbolic link, a directory or a device named like a log is a dead letter
naming it, never followed), a line is at most ``MAX_LINE_BYTES`` (a longer one is a
dead letter, cut), a line that is not UTF-8 is a dead letter, and a file that cannot
be read at all is a dead letter naming it; each is then done, so nothing makes the
injector stop or read the same file for ever.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from mwcore import Injector, derive_id
from services.injector.logs import MAX_LINE_BYTES, nominal_second, parse_line

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
        self._queue: list[tuple[int, Path]] = []  # listed, not yet injected (oldest last)

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
        """Inject the oldest file waiting (the directory is listed again once those
        listed are done); returns how many: 0 or 1. One file a step, so the process's
        loop turns (and its health check sees it alive) between files however many
        wait: an injector behind its directory is slow, not stalled."""
        if not self._queue:
            self._queue = self.pending()[::-1]
        n = 0
        if self._queue:
            self._inject(*self._queue.pop())
            n = 1
        self.inj.poll()
        return n

    def _inject(self, second: int, path: Path) -> None:
        inj = self.inj
        jitter = self.cfg.jitter_ms()
        inj.advance(second - jitter)
        inj.report()  # the promise is made before the file's records go out
        name = path.name
        file_id = hashlib.blake2b(name.encode(), digest_size=16).digest()
        n = -1
        for n, raw in enumerate(_lines(path, file_id, inj)):
            rid = derive_id(file_id, n)
            try:
                if len(raw) > MAX_LINE_BYTES:
                    raise ValueError(f"line of more than {MAX_LINE_BYTES} bytes")
                rec = parse_line(raw.decode())
            except (ValueError, UnicodeDecodeError) as exc:
                inj.dead_letter(raw, str(exc), rid, file=name, line=str(n + 1))
                continue
            value = {
                "query": rec["query"],
                "lang": rec["lang"],
                "user": rec["user"],
                "source_file": name,
            }
            inj.send(self.cfg.stream, rec["query"], value, rec["ts"], rid)
        inj.flush()
        self.inj.finish(path.name)
        inj.advance(second + 1000 - jitter)
        self.files += 1
        self.records += n + 1
        log.debug("file_injected", file=path.name, lines=n + 1)


def _lines(path: Path, file_id: bytes, inj: Injector) -> Iterator[bytes]:
    """The file's lines, as bytes (a line past ``MAX_LINE_BYTES`` is cut just past it);
    nothing but a dead letter naming it for what is not a regular file, or cannot be
    read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:  # a symbolic link (ELOOP), gone, not readable
        _refuse(inj, path, file_id, f"cannot be read: {exc.strerror}")
        return
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # (a directory cannot even be wrapped)
        os.close(fd)
        _refuse(inj, path, file_id, "not a regular file")
        return
    with os.fdopen(fd, "rb") as f:
        try:
            while line := f.readline(MAX_LINE_BYTES + 1):
                if len(line) > MAX_LINE_BYTES:
                    while (rest := f.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                        pass  # the rest of an overlong line
                yield line.rstrip(b"\r\n")
        except OSError as exc:
            _refuse(inj, path, file_id, f"cannot be read: {exc.strerror}")


def _refuse(inj: Injector, path: Path, file_id: bytes, why: str) -> None:
    log.warning("file_refused", file=path.name, reason=why)
    inj.dead_letter(
        b"", f"{path.name}: {why}", derive_id(file_id, 2**31), reason="file_refused", file=path.name
    )
