"""The log reader's turns (pure: a recording twin of the injector; what it sends
through a real one is ``tests/test_zeitgeist.py``'s and the compose tests')."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from mwcore import Injector
from services.injector.logs import file_name, record_line, write_atomically
from services.injector.reader import LogReader, ReaderConfig


class Recording:
    """What the reader asks of an injector, recorded."""

    processes = 1
    index = 0

    def __init__(self) -> None:
        self.done: set[str] = set()
        self.sent: list[tuple[str, int]] = []  # (file, record timestamp)
        self.current = ""

    def finished(self) -> set[str]:
        return set(self.done)

    def finish(self, item: str) -> None:
        self.done.add(item)

    def advance(self, watermark: int) -> None: ...

    def report(self) -> None: ...

    def poll(self) -> None: ...

    def flush(self) -> None: ...

    def send(self, stream: str, key: str, value: Any, timestamp: int, record_id: bytes) -> bool:
        self.sent.append((value["source_file"], timestamp))
        return False

    def dead_letter(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"no dead letter expected: {args}")


def write(directory: Path, second: int) -> str:
    name = file_name(second * 1000)
    write_atomically(directory / name, [record_line(second * 1000 + i, "q", "en", i) for i in range(3)])
    return name


def test_a_backlog_is_read_one_file_a_turn_oldest_first(tmp_path: Path) -> None:
    """However many files wait, a step reads one, so the process's loop turns (and its
    health check sees it alive) between them: a reader behind is slow, not stalled."""
    inj = Recording()
    reader = LogReader(cast(Injector, inj), ReaderConfig(tmp_path, lambda: 0))
    names = [write(tmp_path, s) for s in (30, 10, 20)]
    turns = []
    for _ in range(3):
        turns.append(reader.step())
        assert len(inj.done) == len(turns)  # one file finished per turn
    assert turns == [1, 1, 1]
    assert [f for f, _ in inj.sent[::3]] == sorted(names)  # in time order
    assert len(inj.sent) == 9 and reader.files == 3 and reader.records == 9
    assert reader.step() == 0  # nothing left: the loop idles


def test_a_file_that_appears_meanwhile_is_read_once_those_listed_are_done(tmp_path: Path) -> None:
    inj = Recording()
    reader = LogReader(cast(Injector, inj), ReaderConfig(tmp_path, lambda: 0))
    first = [write(tmp_path, s) for s in (1, 2)]
    assert reader.step() == 1
    later = write(tmp_path, 3)
    assert reader.step() == 1 and reader.step() == 1
    assert [f for f, _ in inj.sent[::3]] == [*first, later]
    assert reader.step() == 0 and inj.done == {*first, later}
