"""`mw replay` on a loaded archive: its progress output and throughput.

Run: ``.venv/bin/python bench/replay.py [--records N]`` (``make bench-replay``).

Starts a local stack, loads N Zeitgeist query records (the default scenario, as
``bench/archive.py`` does) into ``queries`` of the default namespace, then runs
``mw replay --stream queries --from T1 --to T2 --namespace backfill`` as a user
would, over the range from the 5th to the 100th second of the scenario. Prints the
command's stderr (the progress lines) and, last, its JSON summary.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.*, services.*

from bench.archive import START_MS, load
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics
from testbed import wire

ROOT = Path(__file__).resolve().parent.parent


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    args = parser.parse_args()
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    with LocalStack() as stack:
        ensure_topics(stack.bootstrap, {"queries": 4})
        load(stack, registry, "queries", args.records)
        env = {
            **os.environ,
            "MW_BOOTSTRAP": stack.bootstrap,
            "MW_REDIS_URL": stack.redis_url,
            "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
            **wire.registry_env(stack),
        }
        argv = ["--stream", "queries", "--from", iso(START_MS + 5_000), "--to", iso(START_MS + 100_000)]
        done = subprocess.run(
            [sys.executable, "-m", "mwcore", "replay", *argv, "--namespace", "backfill"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    print(f"$ mw replay {' '.join(argv)} --namespace backfill", flush=True)
    print(done.stderr, end="", flush=True)
    if done.returncode != 0:
        sys.exit(done.returncode)
    print(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
