"""structlog set-up: JSON lines on stderr (or a console renderer for humans)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO, cast

import structlog


class _CurrentStderr:
    """Whatever `sys.stderr` is when a line is written, not when logging was configured.

    A command run in-process (the tests call `mw batch` and `mw replay` through `cli.main`) would
    otherwise bind its loggers, cached on first use, to a stream that is closed once it returns.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "info", fmt: str = "json") -> None:
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=True,
    )
