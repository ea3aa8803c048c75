"""``python -m mwcore ...``: the ``mw`` command."""

import os
import sys

from mwcore.tools.cli import main

if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
