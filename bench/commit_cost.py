"""What one checkpoint's commit costs Redis, by part: the server's own time (its
``INFO commandstats``) against the worker's wait for the reply.

Run: ``.venv/bin/python bench/commit_cost.py [--records 1250] [--commits 50]
[--core native|python] [--appendfsync always|no]``; prints JSON last.

Starts its own ``redis-server`` (``appendfsync always`` unless told: as the local stack
and the compose project run it) and commits, through ``RedisCheckpointStore.commit_many`` on
one interval, checkpoints shaped like one interval's batch of ``bench/packing.py``
(``--records`` seen ids, 27% as many state keys, one pending batch, a seen-GC floor),
after 10 of warm-up. Reports per commit: ``wall_ms`` (the call, as the worker waits
for it), ``server_ms`` (the script's run in Redis, its commands included), and the
part of that in the script's commands: ``zadd_ms`` (the seen ids into their sorted
set), ``hset_ms`` (state, positions, pending, metadata), ``info_ms`` (the restart
check's ``INFO server``); the rest of ``server_ms`` is the script itself (its
arguments' checks and its calls' arguments). ``seen_us_per_id``: ``zadd_ms`` per id.
What ``wall_ms`` adds to ``server_ms`` is the packing (``--core``: as ``MW_CORE``), the
transfer, Redis parsing the call, and writing and syncing its append-only file (which
``--appendfsync no`` leaves to the kernel).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.packing import checkpoint
from mwcore.core import CORES, Core, default_core
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore
from mwcore.tools.stack.localstack import RedisServer

WARM_UP = 10


def command_ms(stats: dict[str, Any], command: str, commits: int) -> float:
    return float(stats.get(f"cmdstat_{command}", {}).get("usec", 0)) / 1000 / commits


def measure(records: int, commits: int, core: Core, appendfsync: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mw-commit-cost-") as tmp:
        server = RedisServer(directory=Path(tmp), appendfsync=appendfsync).start()  # type: ignore[arg-type]
        try:
            client = redis.Redis.from_url(server.url)
            store = RedisCheckpointStore(client, core=core)
            iv = IntervalId("bench", "commit_cost", 0)
            token = store.grant(iv, "bench")
            rng = random.Random(1)
            cps = [checkpoint(records, rng) for _ in range(WARM_UP + commits)]
            for cp in cps[:WARM_UP]:
                store.commit_many([(iv, token, cp)])
            client.config_resetstat()
            start = time.perf_counter()
            for cp in cps[WARM_UP:]:
                [result] = store.commit_many([(iv, token, cp)])
                assert isinstance(result, int), result
            wall = (time.perf_counter() - start) / commits
            stats = client.info("commandstats")
            client.close()
        finally:
            server.stop()
    zadd = command_ms(stats, "zadd", commits)
    return {
        "core": core,
        "appendfsync": appendfsync,
        "records": records,
        "commits": commits,
        "wall_ms": round(wall * 1000, 3),
        "server_ms": round(command_ms(stats, "evalsha", commits), 3),
        "zadd_ms": round(zadd, 3),
        "hset_ms": round(command_ms(stats, "hset", commits), 3),
        "info_ms": round(command_ms(stats, "info", commits), 3),
        "seen_us_per_id": round(zadd * 1000 / records, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1250, help="records (seen ids) per checkpoint")
    parser.add_argument("--commits", type=int, default=50, help="commits timed, after 10 of warm-up")
    parser.add_argument("--core", choices=CORES, default=default_core(), help="as MW_CORE")
    parser.add_argument("--appendfsync", choices=("always", "no"), default="always")
    args = parser.parse_args()
    print(json.dumps(measure(args.records, args.commits, args.core, args.appendfsync)))


if __name__ == "__main__":
    main()
