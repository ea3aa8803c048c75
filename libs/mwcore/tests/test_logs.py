"""Log lines go to the stderr of the moment, so a command run in-process leaves no dead stream behind."""

from __future__ import annotations

import io
import json

import pytest
import structlog

from mwcore.process import logs


def test_a_logger_cached_under_one_stderr_writes_to_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    logs.configure()
    log = structlog.get_logger("test_logs")
    log.info("first_line")
    first.close()  # what pytest does to a test's captured stderr once the test is over
    monkeypatch.setattr("sys.stderr", second)
    log.info("second_line", n=2)
    line = json.loads(second.getvalue())
    assert (line["event"], line["n"], line["level"]) == ("second_line", 2, "info")
    structlog.reset_defaults()
