"""``LocalStack``'s work directory: a directory of its own making goes when it stops (the
benchmarks and ``mw stack`` used to leave one of some 500 MB in /tmp per run), one it was
given stays (``mw up``'s, the tests')."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mwcore.tools.stack.localstack import LocalStack


@dataclass
class Part:
    """A broker or a Redis that writes into its directory, as the real ones do."""

    directory: Path | None = None
    product: str = "part"
    running: bool = field(default=False, init=False)

    @property
    def bootstrap(self) -> str:
        return "127.0.0.1:1"

    @property
    def url(self) -> str:
        return "redis://127.0.0.1:1"

    def running_version(self) -> str:
        return "0"

    def start(self, timeout: float = 20) -> Part:
        assert self.directory is not None
        self.directory.mkdir(parents=True)
        (self.directory / "data").write_bytes(b"x" * 1024)
        self.running = True
        return self

    def stop(self, timeout: float = 20) -> None:
        self.running = False


def test_a_directory_of_its_own_making_goes_when_it_stops() -> None:
    broker, redis = Part(), Part()
    with LocalStack(broker=broker, redis=redis) as stack:
        workdir = stack.workdir
        assert workdir is not None and (workdir / "kafka" / "data").exists()
    assert not broker.running and not redis.running
    assert not workdir.exists()


def test_a_directory_it_was_given_stays(tmp_path: Path) -> None:
    with LocalStack(workdir=tmp_path / "stack", broker=Part(), redis=Part()):
        pass
    assert (tmp_path / "stack" / "redis" / "data").exists()
