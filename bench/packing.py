"""Packing one checkpoint's commit command: each core's packer (``Core.packer``), in one
process, alternating.

Run: ``.venv/bin/python bench/packing.py [--records 5000] [--rounds 9]``; prints one
line per round and variant, JSON last.

The checkpoint has the shape of a 5,000-record batch of ``bench/hotpath.py``'s keyed
count: 1,350 state sets (keys ``query-N``, values a few digits), 5,000 seen ids (16
random bytes, millisecond timestamps), one 307,000-byte pending batch, one input
position and a seen-GC floor (``--records`` scales it). The cycle collector is tuned
as in a worker (``--gc-threshold``). Timed per checkpoint:

- ``hiredis``: the reference's packer (``checkpoint_wire.commit_args``), then
  ``fast_script.pack_call`` (``hiredis.pack_command``), as the store packs them;
- ``native``: the native core's packer (``store/checkpoint.rs``, straight from the
  checkpoint's parts), where the native core is built;

and apart: building the arguments, and packing them, per argument. Both cores must give
identical bytes. (The hand-written packer hiredis replaced was measured against it with
this benchmark at 380527c: CHANGELOG.md, measured history.)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mwcore.cores import core, installed
from mwcore.runtime.runner import tune_gc
from mwcore.store import scripts
from mwcore.store.checkpoint import Checkpoint
from mwcore.store.checkpoint_wire import commit_args
from mwcore.store.fast_script import FastScript, Packed, pack_call
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore


def checkpoint(records: int, rng: random.Random) -> Checkpoint:
    """Shaped like a batch of bench/hotpath.py. Its pending batch (307,000 bytes for
    5,000 records) rides as an encoded segment: encode_batch is the same in both
    variants, and only the packing is timed."""
    now = 1_767_000_000_000
    return Checkpoint(
        state={
            f"query-{i}".encode(): str(rng.randrange(1, 1000)).encode() for i in range(records * 27 // 100)
        },
        seen={rng.randbytes(16): now + i for i in range(records)},
        positions={"events:0": 10 * records},
        commit_id=rng.randbytes(16),
        seen_gc_below=now - 60_000,
        segments={rng.randbytes(16): rng.randbytes(records * 614 // 10)},
    )


def per_call_ns(fn: Callable[[], object], number: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(number):
        fn()
    return (time.perf_counter_ns() - start) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--number", type=int, default=50, help="checkpoints packed per timing")
    parser.add_argument("--gc-threshold", type=int, default=50_000, help="as MW_GC_THRESHOLD (0: Python's)")
    args = parser.parse_args()
    rng = random.Random(1)
    cp = checkpoint(args.records, rng)
    store = RedisCheckpointStore(redis.Redis())  # never connects: only packs
    sha = FastScript(store.client, scripts.COMMIT).sha
    keys = store.keys(IntervalId("bench", "count", 0)).commit_keys()
    token = "0123456789abcdef:1"

    reference = core("python").packer()

    def new() -> bytes:
        packed = reference(sha, keys, token, True, cp)
        assert not isinstance(packed, Packed)
        return pack_call(sha, keys, packed)

    flat_args = commit_args(token, True, cp)
    n_args = 3 + len(keys) + len(flat_args)
    tune_gc(args.gc_threshold)
    variants: dict[str, Callable[[], object]] = {
        "hiredis": new,
        "build_args": lambda: commit_args(token, True, cp),
        "pack_args": lambda: pack_call(sha, keys, flat_args),
    }
    if installed():  # (where the native core is built)
        native = core("native").packer()
        got = native(sha, keys, token, True, cp)
        assert isinstance(got, Packed) and got.command == new(), "the native packing differs"
        variants["native"] = lambda: native(sha, keys, token, True, cp)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, fn in variants.items():
            ns = per_call_ns(fn, args.number)
            times[name].append(ns)
            print(
                json.dumps({"round": r, "variant": name, "us_per_checkpoint": round(ns / 1000, 1)}),
                flush=True,
            )
    result: dict[str, Any] = {"records": args.records, "args": n_args, "bytes": len(new())}
    for name, runs in times.items():
        result[name] = {
            "median_us": round(statistics.median(runs) / 1000, 1),
            "min_us": round(min(runs) / 1000, 1),
            "median_ns_per_arg": round(statistics.median(runs) / n_args, 1),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
