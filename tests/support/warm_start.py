"""``python -m tests.support.warm_start RELEASE mw-arguments...``: a worker process that
imports what ``mw run`` needs, touches ``RELEASE.ready``, and runs ``mw`` only once the
file ``RELEASE`` exists (bounded). A test restarts a worker with it in well under a
second, so a check that depends on a quick restart does not depend on how long Python
takes to start on a loaded machine."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mwcore.tools.cli import main


def run(argv: list[str]) -> int:
    release = Path(argv[0])
    Path(f"{release}.ready").touch()
    deadline = time.monotonic() + 300
    while not release.exists():
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.01)
    return main(argv[1:])


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(run(sys.argv[1:]))
