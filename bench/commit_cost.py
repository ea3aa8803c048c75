"""What one checkpoint's commit costs Redis, by part: the server's own time (its
``INFO commandstats``) against the worker's wait for the reply.

Run: ``.venv/bin/python bench/commit_cost.py [--records 1250] [--commits 50]
[--core native|python] [--appendfsync always|no] [--seen-buckets]``; prints JSON last.

Starts its own ``redis-server`` (``appendfsync always`` unless told: as the local
stack and the compose project run it) and commits, through
``RedisCheckpointStore.commit_many`` on one interval, checkpoints shaped like one
interval's batch of ``bench/packing.py`` (27% as many state keys as ``--records``, one
pending batch) with ``--records`` seen ids: the next ones in event time at 10 a
millisecond, the seen GC 60 s behind (the default slack), after enough commits of
warm-up to fill those 60 s.

Per commit: ``wall_ms`` (the call, as the worker waits for it), ``server_ms`` (the
script's run in Redis, its commands included), and the part of that in its commands:
``zadd_ms`` (the seen ids into their sorted set, as ``MW_SEEN_BUCKETS=0``; with
``--seen-buckets``, as the default ``MW_SEEN_BUCKETS=1``, only the buckets' index),
``hset_ms`` (state, positions, pending, metadata), ``info_ms`` (the restart check's
``INFO server``); ``commands_ms``: every command's, among them the buckets' ``sadd``
and the seen GC's ``zremrangebyscore`` or ``del``. The rest of ``server_ms`` is the
script itself (its arguments' checks and its calls' arguments). ``seen_us_per_id``:
the seen ids' inserts (``zadd`` and ``sadd``) per id; ``seen_ids_kept``: the
interval's seen ids at the end. What ``wall_ms`` adds to
``server_ms`` is the packing (``--core``: as ``MW_CORE``), the transfer, Redis parsing
the call, and writing and syncing its append-only file (which ``--appendfsync no``
leaves to the kernel).
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
from mwcore.cores import CORES, CoreName, core, default_name
from mwcore.store.checkpoint import Checkpoint
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore
from mwcore.tools.stack.localstack import RedisServer

T0 = 1_767_000_000_000
PER_MS = 10  # records per ms of event time (bench/windowed.py's 10,000 a second)
SLACK_MS = 60_000  # the seen GC's default slack (MW_SEEN_GC_SLACK_MS)


def commit_at(records: int, k: int, rng: random.Random) -> Checkpoint:
    """The ``k``-th checkpoint: ``bench/packing.py``'s shape, its seen ids the next
    ``records`` of event time at ``PER_MS`` a millisecond, the GC ``SLACK_MS`` behind."""
    cp = checkpoint(records, rng)
    first = T0 + k * records // PER_MS
    cp.seen = {rng.randbytes(16): first + i // PER_MS for i in range(records)}
    cp.seen_gc_below = first - SLACK_MS
    return cp


def command_ms(stats: dict[str, Any], command: str, commits: int) -> float:
    return float(stats.get(f"cmdstat_{command}", {}).get("usec", 0)) / 1000 / commits


def measure(records: int, commits: int, name: CoreName, appendfsync: str, buckets: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mw-commit-cost-") as tmp:
        server = RedisServer(directory=Path(tmp), appendfsync=appendfsync).start()  # type: ignore[arg-type]
        try:
            client = redis.Redis.from_url(server.url)
            store = RedisCheckpointStore(client, packer=core(name).packer(), seen_buckets=buckets)
            iv = IntervalId("bench", "commit_cost", 0)
            token = store.grant(iv, "bench")
            rng = random.Random(1)
            warm_up = SLACK_MS * PER_MS // records + 10  # the seen ids at their steady size
            for k in range(warm_up):
                store.commit_many([(iv, token, commit_at(records, k, rng))])
            cps = [commit_at(records, warm_up + k, rng) for k in range(commits)]
            client.config_resetstat()
            start = time.perf_counter()
            for cp in cps:
                [result] = store.commit_many([(iv, token, cp)])
                assert isinstance(result, int), result
            wall = (time.perf_counter() - start) / commits
            stats = client.info("commandstats")
            seen_ids = len(store.seen_ids(iv))
            client.close()
        finally:
            server.stop()
    zadd = command_ms(stats, "zadd", commits)
    inserts = zadd + command_ms(stats, "sadd", commits)
    return {
        "core": name,
        "appendfsync": appendfsync,
        "seen_buckets": buckets,
        "records": records,
        "commits": commits,
        "wall_ms": round(wall * 1000, 3),
        "server_ms": round(command_ms(stats, "evalsha", commits), 3),
        "zadd_ms": round(zadd, 3),
        "hset_ms": round(command_ms(stats, "hset", commits), 3),
        "info_ms": round(command_ms(stats, "info", commits), 3),
        "seen_us_per_id": round(inserts * 1000 / records, 3),
        "commands_ms": {
            k.removeprefix("cmdstat_"): round(v["usec"] / 1000 / commits, 3)
            for k, v in stats.items()
            if k not in ("cmdstat_evalsha", "cmdstat_config|resetstat")
        },
        "seen_ids_kept": seen_ids,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1250, help="records (seen ids) per checkpoint")
    parser.add_argument("--commits", type=int, default=50, help="commits timed, after the warm-up")
    parser.add_argument("--core", choices=CORES, default=default_name(), help="as MW_CORE")
    parser.add_argument("--appendfsync", choices=("always", "no"), default="always")
    parser.add_argument(
        "--seen-buckets", action="store_true", help="as MW_SEEN_BUCKETS=1 (the default; without it as =0)"
    )
    args = parser.parse_args()
    print(json.dumps(measure(args.records, args.commits, args.core, args.appendfsync, args.seen_buckets)))


if __name__ == "__main__":
    main()
