"""What reading an interval's whole state at acquisition costs (``MW_WHOLE_STATE_MB``).

Run: ``.venv/bin/python bench/whole_state.py``; prints a line a size and JSON (the
last line).

A local Redis (``appendfsync always``, as the stack runs it) holds intervals of 10,000
and 100,000 keys, with values of a few bytes (a count) and of about 600 bytes; each is
read whole as a new owner reads it (``RedisCheckpointStore.whole_state``, the best of
three), and its values decoded once (what the first use of every key costs later,
spread over the records, and not at acquisition).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mwcore import JsonCodec
from mwcore.store.checkpoint import Checkpoint
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore
from mwcore.tools.stack.localstack import RedisServer

CHUNK = 10_000  # keys a commit while filling


def measure(store: RedisCheckpointStore, keys: int, pad: int) -> dict[str, float | int]:
    codec = JsonCodec[list[object]]()
    iv = IntervalId("whole", f"c{keys}-{pad}", 0)
    token = store.grant(iv, "filler")
    for start in range(0, keys, CHUNK):
        state = {f"key-{j}".encode(): codec.encode([j, "x" * pad]) for j in range(start, start + CHUNK)}
        store.commit(iv, token, Checkpoint(state=dict(state)))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        got = store.whole_state(iv, keys, 1 << 30)
        best = min(best, time.perf_counter() - t0)
    assert got is not None and len(got) == keys
    t0 = time.perf_counter()
    for raw in got.values():
        codec.decode(raw)
    decode = time.perf_counter() - t0
    size = sum(len(k) + len(v) for k, v in got.items())
    return {
        "keys": keys,
        "mib": round(size / (1 << 20), 1),
        "read_ms": round(best * 1000, 1),
        "decode_ms": round(decode * 1000, 1),
    }


def main() -> None:
    server = RedisServer().start()
    try:
        store = RedisCheckpointStore(redis.Redis(port=server.port))
        rows = []
        for keys in (10_000, 100_000):
            for pad in (0, 600):
                rows.append(measure(store, keys, pad))
                print(rows[-1], flush=True)
    finally:
        server.stop()
    print(json.dumps({"sizes": rows}))


if __name__ == "__main__":
    main()
