"""A/B of archive reads in Spark: this checkout's ``read_archive`` against older code of
the library (for example the ``format("mw")`` Python data source it replaced), on the
same records in one local stack, alternating.

Run: ``.venv/bin/python bench/archive_ab.py ROUNDS [--records N] PYTHONPATH...``, one
variant per PYTHONPATH (``""``: this checkout; older code: ``git worktree add
/tmp/base <commit>`` and ``/tmp/base/libs/mwcore/src``). Each run is a fresh Spark
``local[2]`` session in its own process reading the whole stream decoded, then not
decoded, into an aggregate (best of two each). The last line is JSON with every run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent


def child(bootstrap: str, namespace: str) -> None:
    """Read the stream with whichever archive reader the library on the path has."""
    from pyspark.sql import functions as F

    from mwcore.archive.spark import source
    from mwcore.archive.spark.session import local_session

    old = hasattr(source, "ArchiveReader")  # the Python data source: format("mw")
    spark = local_session("local[2]", ROOT)

    def read(decode: bool) -> Any:
        if old:
            return (
                spark.read.format("mw")
                .option("bootstrap", bootstrap)
                .option("namespace", namespace)
                .option("streams", "queries")
                .option("schemasDir", str(ROOT / "schemas"))
                .option("decode", str(decode).lower())
                .load()
            )
        return source.read_archive(
            spark, bootstrap, "queries", namespace, ROOT / "schemas", decode=str(decode).lower()
        )

    out: dict[str, Any] = {"reader": "format('mw')" if old else "read_archive"}
    for decode in (True, False):
        df = read(decode)
        column = "user" if decode else "offset"
        best = float("inf")
        for _ in range(2):
            t = time.perf_counter()
            n = int(df.agg(F.count("*"), F.sum(column)).collect()[0][0])
            best = min(best, time.perf_counter() - t)
        out["decoded" if decode else "undecoded"] = round(n / best)
    spark.stop()
    print(json.dumps(out))


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int)
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--records", type=int, default=300_000)
    args = parser.parse_args()
    from bench.archive import load
    from bench.throughput import PARTITIONS
    from mwcore.serde.avro import SchemaRegistry
    from mwcore.tools.stack.localstack import LocalStack
    from mwcore.transport.topics import ensure_topics, topic_name

    runs = []
    with LocalStack() as stack:
        namespace = "archab"
        topic = topic_name(namespace, "queries")
        ensure_topics(stack.bootstrap, {topic: PARTITIONS})
        load(stack, SchemaRegistry.from_directory(ROOT / "schemas"), topic, args.records)
        for r in range(args.rounds):
            for path in args.variants:
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (path, str(ROOT)) if p)}
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", stack.bootstrap, namespace],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                run = {"round": r, "pythonpath": path, **json.loads(proc.stdout.strip().splitlines()[-1])}
                print(json.dumps(run), flush=True)
                runs.append(run)
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
