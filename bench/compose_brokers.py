"""The ``three-brokers`` compose profile with a broker killed and brought back, for real:
``docker compose --env-file compose/three-brokers.env up`` on a Docker engine (started
here if none answers) with the images ``make images`` builds, the generator writing the
default scenario in real time; ``kafka-2`` SIGKILLed 15 s into the run and brought back
10 s later; every window count 25 s past the kill exact against the query logs (none
lost, none twice).

About six minutes on a two-core host (three JVM brokers beside the registry's and the
services), which is why it is a run of its own rather than a test of ``make test``:
there, ``tests/test_compose.py`` checks the profile is one replicated quorum every service
is told of, and ``tests/test_kafka_cluster.py`` SIGKILLs one broker of three under load.

Run: ``.venv/bin/python bench/compose_brokers.py [--workdir DIR]``; the last line is JSON
(``"problems"`` empty when every window is exact); exit 1 when it is not.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testbed.*

from testbed.compose_project import broker_killed_and_back, engine, project
from testbed.images import ROOT


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/compose_brokers.py")
    parser.add_argument("--workdir", type=Path, help="the project's files and logs (default: a new one)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mw-compose-brokers-"))
    began = time.monotonic()
    profile = ROOT / "compose" / "three-brokers.env"
    with engine(workdir / "images.log"), project(workdir / "project", profile) as p:
        up_s = time.monotonic() - began
        problems = broker_killed_and_back(p)
    summary = {
        "profile": "three-brokers",
        "killed": "kafka-2",
        "problems": problems,
        "up_s": round(up_s, 1),
        "seconds": round(time.monotonic() - began, 1),
        "logs": str(workdir / "project" / "compose.log"),
    }
    print(json.dumps(summary))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
