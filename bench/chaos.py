"""The fault suite (``testbed/chaos/suite.py`` says what it does and prints).

Run: ``.venv/bin/python bench/chaos.py [--faults 40] [--seed 1] [--scenario mixed|rollback]
[--brokers 3] [--redis-cluster]``; the last line printed is JSON with ``"verdict"``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testbed.*

from testbed.chaos.suite import main

if __name__ == "__main__":
    sys.exit(main())
